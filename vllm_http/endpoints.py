"""The vLLM server's endpoints the tuner asks besides the load, and what a request to one raises
when it got no answer it could use. The paths are written here and nowhere else in the product
(tests/unit/vllm_http/test_one_home.py holds that), but for the route the tuner's own plugin
serves: the plugin runs in the server's Python, which may not have this package, so it spells
`RECONFIGURE` itself and that test holds the two equal."""

from __future__ import annotations

HEALTH = "/health"
MODELS = "/v1/models"
METRICS = "/metrics"
TOKENIZE = "/tokenize"
RESET_PREFIX_CACHE = "/reset_prefix_cache"
# Served only by the tuner's servers, whose plugin adds it (`serving.process.reconfiguration`).
RECONFIGURE = "/autotune/reconfigure"

# What a vLLM server needs in its environment to serve `POST /reset_prefix_cache`.
RESET_ENDPOINT_ENV = {"VLLM_SERVER_DEV_MODE": "1"}


class Unanswered(Exception):
    """No HTTP answer: nothing listens, the connection broke, or the time ran out."""


class TimedOut(Unanswered):
    """No HTTP answer within the request's timeout: silence, where a refused or broken connection
    is the server's process gone (a hang check tells the two apart)."""


class BadStatus(Exception):
    """An answer, but not a 200: the message says which request and what came back."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status
