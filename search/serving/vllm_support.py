"""The oldest vLLM the tuner runs on, and the one-line refusal of an older one.

0.26.0: the oldest build the tuner has been run on (the project's GPU test machine), and the
floor of the `gpu` extra in pyproject.toml, which a test holds to this value. What the flag
registry knows of older builds (the V0 scheduler's flags, removed in 0.11; swap space, removed
in 0.18) is all older than that, so it still explains a scenario written for them, while every
flag it reads comes from the installed vLLM's own parser (`vllm_flags`).
"""

from __future__ import annotations

from search.serving.vllm_flags import VllmNotInstalled, parse_version

OLDEST_SUPPORTED_VLLM = "0.26.0"


class VllmTooOld(VllmNotInstalled):
    pass


def check_supported(dist: str, version: str) -> None:
    """Raise VllmTooOld, in one line, when `dist` `version` is older than OLDEST_SUPPORTED_VLLM."""
    if parse_version(version) < parse_version(OLDEST_SUPPORTED_VLLM):
        raise VllmTooOld(
            f"the installed {dist} {version} is older than {OLDEST_SUPPORTED_VLLM}, the oldest vLLM this tuner "
            f"supports: upgrade it (pip install '{dist}>={OLDEST_SUPPORTED_VLLM}'), or use an image with a newer one")
