"""One-off experiments: each answered one question once (README.md beside this file says which, when
and where the answer is written down). Run one again as `python -m benchmarks.experiments.NAME`."""
