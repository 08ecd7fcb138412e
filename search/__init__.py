"""Search layer: CLI, study, trial loop, vLLM server launcher, parameter registry."""
