"""The tuner's HTTP to a vLLM server besides the load, in one place: each endpoint it asks,
asked by one function in `calls`. The load itself (the completion requests a run measures) is
`loadgen`'s client's.

Blocking, on a fresh connection (the thread that starts or keeps a server): `healthy`
(GET /health answers 200), `exchange` (one request: a live reconfiguration's). On an event
loop, on the caller's aiohttp session: `get_health` (a load client's pre-connect, the liveness
check before a verdict), `served_models` (GET /v1/models), `fetch_metrics_text` (GET /metrics,
whose text `loadgen.server_metrics` reads: the drain, the gauge sampler, a run's scrapes),
`count_chat_tokens` (POST /tokenize), and `reset_prefix_cache` between load stages. The paths
(a live reconfiguration's too: `RECONFIGURE`, asked through `exchange`) and the errors are
`endpoints`'.

It imports none of the project's packages and every one may import it: the bottom layer.
Other packages import from here, never from the modules inside.
"""

from vllm_http.calls import (
    SeesRequests,
    count_chat_tokens,
    exchange,
    fetch_metrics_text,
    get_health,
    healthy,
    reset_prefix_cache,
    served_models,
)
from vllm_http.endpoints import RECONFIGURE, RESET_ENDPOINT_ENV, BadStatus, TimedOut, Unanswered

__all__ = [
    "RECONFIGURE",
    "RESET_ENDPOINT_ENV",
    "BadStatus",
    "SeesRequests",
    "TimedOut",
    "Unanswered",
    "count_chat_tokens",
    "exchange",
    "fetch_metrics_text",
    "get_health",
    "healthy",
    "reset_prefix_cache",
    "served_models",
]
