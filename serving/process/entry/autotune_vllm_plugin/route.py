"""The API server's route to the engine utility `reconfigure` adds: `POST /autotune/reconfigure`,
a JSON object of knobs in, the utility's answer out (200 applied, 409 refused, 501 unavailable).

Why a route of the plugin's own rather than a dev endpoint: vLLM's dev endpoints reach the
workers (`/collective_rpc`) or fixed EngineCore methods, none an EngineCore utility by name; and
the tuner's servers enable the dev endpoints only where a measurement resets the prefix cache.
This route exists only in the tuner's servers (the plugin is on there alone), which bind to
127.0.0.1 like every server the tuner starts. It is added to the app where vLLM adds its own
serving routes (`vllm.entrypoints.serve.register_vllm_serve_api_routers`, looked up when vLLM
builds the app in 0.26 and 0.32 alike); the engine client is read from the app's state at each
call (`app.state.engine_client.engine_core.call_utility_async`).

Where the EngineCore lacks the utility (vLLM spawned it, so the plugin is not in it) or the
engine client is not one this knows (several data-parallel engines, which one call would not
all reach), the answer is "unavailable", and the tuner starts a fresh server instead.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from . import hooks
from .reconfigure import APPLIED, METHOD, REFUSED, UNAVAILABLE

SERVE = "vllm.entrypoints.serve"
REGISTER = "register_vllm_serve_api_routers"
# vllm_http.RECONFIGURE, spelt again: this module runs in the server's Python, which may not have
# the tuner's packages (tests/unit/vllm_http/test_one_home.py holds the two equal).
PATH = "/autotune/reconfigure"
STATUS_CODES = {APPLIED: 200, REFUSED: 409, UNAVAILABLE: 501}


def unavailable(reason: str) -> dict[str, Any]:
    return {"status": UNAVAILABLE, "reason": reason}


async def call_engine(state: Any, asked: Any) -> dict[str, Any]:
    """The engine utility's answer for `asked`, through the engine client in the app's `state`."""
    if not isinstance(asked, dict):
        return {"status": REFUSED, "reason": "the body must be a JSON object of knobs"}
    core = getattr(getattr(state, "engine_client", None), "engine_core", None)
    call = getattr(core, "call_utility_async", None)
    if not callable(call):
        return unavailable("the engine client has no call_utility_async")
    if len(getattr(core, "core_engines", None) or ()) > 1:
        return unavailable("several engines (data parallel): one utility call reaches only the first")
    try:
        answer = await call(METHOD, asked)
    except Exception as e:  # the method is missing where the EngineCore runs without the plugin
        return unavailable(f"the engine did not run {METHOD}: {e}")
    if not isinstance(answer, dict) or answer.get("status") not in STATUS_CODES:
        return unavailable(f"the engine answered {answer!r}")
    return answer


def add_route(app: Any) -> None:
    from fastapi.responses import JSONResponse  # vLLM's API server has imported FastAPI by now

    async def autotune_reconfigure(request):
        try:
            asked = await request.json()
        except ValueError:
            asked = None
        answer = await call_engine(request.app.state, asked)
        return JSONResponse(answer, status_code=STATUS_CODES[answer["status"]])

    app.add_route(PATH, autotune_reconfigure, methods=["POST"])


def patch_routers(module: ModuleType, say: Callable[[str], None]) -> None:
    original = getattr(module, REGISTER, None)
    if not callable(original):
        say(f"no {REGISTER} in this vLLM: no {PATH} route, so no live reconfiguration")
        return

    def with_the_reconfiguration_route(app, *args, **kwargs):
        result = original(app, *args, **kwargs)
        add_route(app)
        return result

    setattr(module, REGISTER, with_the_reconfiguration_route)


def install(say: Callable[[str], None]) -> None:
    hooks.when_imported(SERVE, lambda m: patch_routers(m, say))
