"""The live reconfiguration the tuner's plugin adds: an EngineCore utility that lowers a drained
server's max_num_seqs, max_num_batched_tokens and long_prefill_token_threshold, never above the
values it started with; the API server's route to it; the tuner's reading of the answer."""

from __future__ import annotations

import asyncio
import json
import sys
from types import ModuleType, SimpleNamespace

import pytest

from serving.process import reconfiguration
from serving.process.entry import autotune_vllm_plugin as plugin
from serving.process.entry.autotune_vllm_plugin import hooks, reconfigure, route
from serving.process.launch_spec import PLUGIN_ENV
from serving.process.reconfiguration import parse, within_start
from vllm_http import Unanswered

START = {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "long_prefill_token_threshold": 0}


class Scheduler:
    """The attributes vLLM 0.26's scheduler reads (0.32's add `max_num_active_reqs`)."""

    def __init__(self, running: int = 0, waiting: int = 0, active: bool = False, **config):
        self.scheduler_config = SimpleNamespace(**{**START, "max_num_scheduled_tokens": None, **config})
        self.max_num_running_reqs = self.scheduler_config.max_num_seqs
        self.max_num_scheduled_tokens = self.scheduler_config.max_num_batched_tokens
        if active:
            self.scheduler_config.max_num_active_seqs = None
            self.max_num_active_reqs = self.max_num_running_reqs
        self.counts = (running, waiting)

    def get_request_counts(self):
        return self.counts


class Engine:
    def __init__(self, scheduler):
        self.scheduler, self.resets = scheduler, 0

    def reset_prefix_cache(self):
        self.resets += 1
        return True


def call(engine, asked):
    return reconfigure.reconfigure(engine, asked, lambda _: None)


# -- what the engine refuses -----------------------------------------------------------------


@pytest.mark.parametrize(
    "asked",
    [{"max_num_seqs": 65}, {"max_num_batched_tokens": 4096}, {"max_num_seqs": 128, "max_num_batched_tokens": 4096}],
)
def test_a_value_above_the_start_value_is_refused_and_nothing_changes(asked):
    engine = Engine(Scheduler())
    answer = call(engine, asked)
    assert answer["status"] == reconfigure.REFUSED and "above the value the server started with" in answer["reason"]
    assert engine.scheduler.max_num_running_reqs == 64 and engine.scheduler.max_num_scheduled_tokens == 2048
    assert engine.resets == 0


def test_a_threshold_on_a_server_started_without_one_is_lower_and_none_on_one_started_with_one_is_higher():
    assert within_start("long_prefill_token_threshold", 256, 0)  # 0: no threshold, above every number
    assert not within_start("long_prefill_token_threshold", 0, 256)
    started_with_one = Engine(Scheduler(long_prefill_token_threshold=512))
    assert call(started_with_one, {"long_prefill_token_threshold": 0})["status"] == reconfigure.REFUSED
    assert call(Engine(Scheduler()), {"long_prefill_token_threshold": 256})["status"] == reconfigure.APPLIED


@pytest.mark.parametrize("running, waiting", [(1, 0), (0, 3)])
def test_a_server_that_is_not_drained_is_refused(running, waiting):
    engine = Engine(Scheduler(running=running, waiting=waiting))
    answer = call(engine, {"max_num_seqs": 8})
    assert answer["status"] == reconfigure.REFUSED and "not drained" in answer["reason"]
    assert engine.scheduler.max_num_running_reqs == 64


def test_an_unknown_knob_and_a_value_vllm_would_refuse_at_start_are_refused():
    assert "unknown knob gpu_memory_utilization" in call(Engine(Scheduler()), {"gpu_memory_utilization": 0.5})["reason"]
    below = call(Engine(Scheduler()), {"max_num_seqs": 32, "max_num_batched_tokens": 16})
    assert below["status"] == reconfigure.REFUSED and "below max_num_seqs" in below["reason"]
    assert call(Engine(Scheduler()), {"max_num_seqs": "8"})["status"] == reconfigure.REFUSED


# -- what it sets ------------------------------------------------------------------------------


@pytest.mark.parametrize("active", [False, True], ids=["vllm-0.26", "vllm-0.32"])
def test_the_limits_are_set_where_the_scheduler_reads_them_and_the_prefix_cache_is_reset(active):
    scheduler = Scheduler(active=active)
    engine = Engine(scheduler)
    asked = {"max_num_seqs": 8, "max_num_batched_tokens": 512, "long_prefill_token_threshold": 256}
    answer = call(engine, asked)
    assert answer == {"status": "applied", "values": asked, "start": START, "prefix_cache_reset": True}
    assert (scheduler.max_num_running_reqs, scheduler.scheduler_config.max_num_seqs) == (8, 8)
    assert (scheduler.max_num_scheduled_tokens, scheduler.scheduler_config.max_num_batched_tokens) == (512, 512)
    assert scheduler.scheduler_config.long_prefill_token_threshold == 256
    assert not active or scheduler.max_num_active_reqs == 8
    assert engine.resets == 1


def test_the_start_values_bound_every_later_call_and_a_knob_left_out_goes_back_to_its_start_value():
    engine = Engine(Scheduler())
    call(engine, {"max_num_seqs": 8, "max_num_batched_tokens": 512})
    assert call(engine, {"max_num_seqs": 64})["values"] == START  # up again, to the start value: allowed
    assert call(engine, {"max_num_seqs": 65})["status"] == reconfigure.REFUSED


@pytest.mark.parametrize(
    "scheduler, why",
    [
        (SimpleNamespace(), "no integer max_num_seqs"),
        (Scheduler(max_num_scheduled_tokens=1024), "apart from max_num_batched_tokens"),
    ],
)
def test_a_scheduler_of_another_shape_makes_it_unavailable(scheduler, why):
    answer = call(Engine(scheduler), {"max_num_seqs": 8})
    assert answer["status"] == reconfigure.UNAVAILABLE and why in answer["reason"]


def test_the_plugin_adds_the_utility_to_the_engine_core_as_vllm_looks_it_up(monkeypatch):
    monkeypatch.setattr(plugin, "_active", [])
    monkeypatch.setattr(plugin, "_said", set())
    monkeypatch.setattr(hooks, "_waiting", {})
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if f is not hooks._FINDER])
    core = ModuleType(reconfigure.ENGINE_CORE)

    class EngineCore(Engine):
        pass

    core.EngineCore = EngineCore
    monkeypatch.setitem(sys.modules, reconfigure.ENGINE_CORE, core)
    plugin.activate({PLUGIN_ENV: "1"})
    engine = EngineCore(Scheduler())
    method = getattr(engine, reconfigure.METHOD)  # EngineCore._handle_client_request, UTILITY
    assert method({"max_num_seqs": 4})["status"] == reconfigure.APPLIED


# -- the route, and the tuner's reading of it --------------------------------------------------


def state(call_utility_async, engines: int = 1):
    core = SimpleNamespace(call_utility_async=call_utility_async, core_engines=[object()] * engines)
    return SimpleNamespace(engine_client=SimpleNamespace(engine_core=core))


def test_the_route_passes_the_knobs_to_the_utility_and_its_answer_back():
    seen = []

    async def utility(method, asked):
        seen.append((method, asked))
        return {"status": "applied", "values": asked}

    answer = asyncio.run(route.call_engine(state(utility), {"max_num_seqs": 8}))
    assert answer["status"] == "applied" and seen == [(reconfigure.METHOD, {"max_num_seqs": 8})]


def test_an_engine_without_the_utility_or_several_engines_are_unavailable_not_an_error():
    async def missing(method, asked):
        raise RuntimeError(f"Call to {method} method failed: 'EngineCoreProc' object has no attribute")

    async def never(method, asked):
        raise AssertionError("one call would reach only the first engine")

    assert asyncio.run(route.call_engine(state(missing), {}))["status"] == reconfigure.UNAVAILABLE
    assert asyncio.run(route.call_engine(state(never, engines=2), {}))["status"] == reconfigure.UNAVAILABLE
    assert asyncio.run(route.call_engine(SimpleNamespace(), {}))["status"] == reconfigure.UNAVAILABLE


def test_the_route_is_added_where_vllm_adds_its_serving_routes(monkeypatch):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    module = ModuleType(route.SERVE)
    module.register_vllm_serve_api_routers = lambda app: None
    route.patch_routers(module, lambda _: None)
    app = FastAPI()
    module.register_vllm_serve_api_routers(app)  # as build_app calls it

    async def utility(method, asked):
        return {"status": "refused", "reason": "the server is not drained (1 running, 0 waiting)"}

    app.state.engine_client = state(utility).engine_client
    response = TestClient(app).post(route.PATH, json={"max_num_seqs": 8})
    assert response.status_code == 409
    got = parse(response.status_code, response.content)
    assert got.status == "refused" and not got.applied and "not drained" in got.reason


def test_the_tuner_reads_a_server_without_the_route_as_unavailable():
    assert parse(404, b"Not Found").status == reconfigure.UNAVAILABLE
    assert parse(500, b"oops").status == reconfigure.UNAVAILABLE
    body = json.dumps({"status": "applied", "values": {"max_num_seqs": 8}, "start": START}).encode()
    assert parse(200, body).values == {"max_num_seqs": 8}


def test_the_tuner_posts_the_knobs_to_the_route_and_a_server_that_does_not_answer_is_unavailable(monkeypatch):
    asked = []

    def answered(host, port, method, path, *, json_body=None, timeout_s):
        asked.append((host, port, method, path, json_body))
        return 200, json.dumps({"status": "applied", "values": {"max_num_seqs": 8}}).encode()

    monkeypatch.setattr(reconfiguration, "exchange", answered)
    got = reconfiguration.reconfigure(8123, {"max_num_seqs": 8, "long_prefill_token_threshold": None})
    assert got.applied and got.values == {"max_num_seqs": 8}
    assert asked == [("127.0.0.1", 8123, "POST", route.PATH, {"max_num_seqs": 8, "long_prefill_token_threshold": None})]

    def unanswered(*args, **kwargs):
        raise Unanswered("Connection refused")

    monkeypatch.setattr(reconfiguration, "exchange", unanswered)
    got = reconfiguration.reconfigure(8123, {"max_num_seqs": 8})
    assert got.status == reconfigure.UNAVAILABLE
    assert got.reason == f"POST {route.PATH} failed: Connection refused"
