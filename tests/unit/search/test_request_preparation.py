"""The first stage's requests built while the server starts: a run finds them built and sends the
same requests it would have built itself; the executor builds them beside the start, not after it."""

from __future__ import annotations

import threading

import pytest

from loadgen import preparation as prep
from loadgen import prepare_requests
from loadgen.prompts import build_requests, requests_digest
from loadgen.workload import WorkloadSpec
from search.executor import Measurement, TrialPlan, VllmExecutor
from search.executor import vllm as executor_mod
from serving import resolve_server_args
from serving.process import StopReport
from storage.tables import TrialStatus
from tests.support import fakes

WORKLOAD = {
    "endpoint": "chat",
    "seed": 7,
    "duration_s": 10,
    "warmup_requests": 3,
    "arrival": {"mode": "gamma", "burstiness": 0.5, "rate": 2.0},
    "classes": [
        {
            "name": "short",
            "weight": 0.7,
            "prompt_tokens": {"dist": "uniform", "low": 40, "high": 80},
            "output_tokens": 8,
            "shared_prefix": {"fraction": 0.6, "tokens": 16, "count": 2},
        },
        {
            "name": "long",
            "weight": 0.3,
            "prompt_tokens": {"dist": "uniform", "low": 150, "high": 250},
            "output_tokens": 16,
        },
    ],
}


@pytest.fixture
def empty_caches(monkeypatch):
    """A new tuner process's: nothing built, no tokenizer loaded."""
    monkeypatch.setattr(prep, "_BUILD_CACHE", {})
    monkeypatch.setattr(prep, "_LOCAL_BUILDS", {})
    monkeypatch.setattr(prep, "_TOKENIZERS", {})


class AgreeingServer:
    """The server's /tokenize, counting as the local template does."""

    def __init__(self, tokenizer):
        self.tokenizer, self.asked = tokenizer, 0

    async def __call__(self, messages) -> int:
        self.asked += 1
        return self.tokenizer.count_chat(messages)


async def first_stage(spec: WorkloadSpec, tokenizer, n: int):
    counter, notes = AgreeingServer(tokenizer), []
    measured = await prep.cached_requests(spec, tokenizer, n, False, counter, notes)
    warm = await prep.cached_requests(spec, tokenizer, spec.warmup_requests, True, counter, notes)
    return measured, warm, counter


def test_a_run_sends_the_same_requests_whether_they_were_prepared_or_not(tok_dir, empty_caches, monkeypatch):
    import asyncio

    spec = WorkloadSpec.model_validate(WORKLOAD)
    tokenizer = prep.load_tokenizer(tok_dir)
    n = prep.planned_requests(spec, _offsets(spec))  # what the run's first stage sends
    built, built_warm, _ = asyncio.run(first_stage(spec, tokenizer, n))

    monkeypatch.setattr(prep, "_BUILD_CACHE", {})
    monkeypatch.setattr(prep, "_LOCAL_BUILDS", {})
    assert prepare_requests(spec, tok_dir) == spec.warmup_requests + n

    def no_second_build(*args, **kwargs):
        raise AssertionError("the run built its requests again")

    monkeypatch.setattr(prep, "build_requests", no_second_build)
    prepared, prepared_warm, counter = asyncio.run(first_stage(spec, tokenizer, n))
    assert requests_digest(prepared) == requests_digest(built) and len(prepared) == n
    assert requests_digest(prepared_warm) == requests_digest(built_warm)
    assert 0 < counter.asked <= 2 * prep.CHAT_PROBE_REQUESTS  # the server still checks a few


def _offsets(spec):
    from loadgen import open_loop_offsets

    return open_loop_offsets(spec.arrival, spec.num_requests, spec.duration_s, spec.seed).tolist()


def test_a_stream_built_in_parts_is_the_stream_built_at_once(tok, empty_caches):
    spec = WorkloadSpec.model_validate(WORKLOAD)
    prep.local_requests(spec, tok, 5, False)
    longer = prep.local_requests(spec, tok, 12, False)
    assert requests_digest(longer) == requests_digest(build_requests(spec, tok, 12))
    assert requests_digest(prep.local_requests(spec, tok, 4, False)) == requests_digest(build_requests(spec, tok, 4))


def test_the_executor_builds_the_first_stages_requests_while_the_server_starts(
    tok_dir, empty_caches, monkeypatch, tmp_path
):
    built = threading.Event()

    def prepare(spec, path):
        prepare_requests(spec, tok_dir)
        built.set()

    class SlowStart:
        """A server that answers /health only once the requests are built: were they built after
        its start, it would never answer."""

        ready_s = None
        zygote_failure = None

        def start(self):
            if not built.wait(timeout=20):
                raise AssertionError("the requests were not built while the server started")
            self.ready_s = 1.0

        def stop(self, kill: bool = False):
            return StopReport(0.1, False, True, None)

    measured: list[str] = []

    def measure(self, server, outcome, *_):
        spec = self.measurement.workload
        tokenizer = prep.load_tokenizer(tok_dir)
        measured.append(requests_digest(prep.local_requests(spec, tokenizer, 10, False)))
        outcome.metrics["completed"] = 1.0

    monkeypatch.setattr(executor_mod, "prepare_requests", prepare)
    monkeypatch.setattr(executor_mod, "launch", lambda *a, **k: SlowStart())
    monkeypatch.setattr(VllmExecutor, "_measure", measure)
    ctx = fakes.ctx()
    spec = WorkloadSpec.model_validate(WORKLOAD)
    plan = TrialPlan(1, None, {}, {}, resolve_server_args({}, ctx, where="t"), [])
    outcome = VllmExecutor(ctx, Measurement(spec), tmp_path).run(plan)
    assert outcome.status is TrialStatus.OK, outcome.failure
    assert measured == [requests_digest(build_requests(spec, prep.load_tokenizer(tok_dir), 10))]


def test_two_builds_of_one_stream_at_once_extend_it_once(tok, empty_caches, monkeypatch):
    """A build left running by a failed start and the retry's: the stream holds each request once."""
    spec = WorkloadSpec.model_validate(WORKLOAD)
    second_inside = threading.Event()
    calls = []

    def build(*args, **kwargs):
        calls.append(kwargs.get("start"))
        if len(calls) == 1:
            second_inside.wait(timeout=0.5)  # the other thread gets in here only without the lock
        else:
            second_inside.set()
        return build_requests(*args, **kwargs)

    monkeypatch.setattr(prep, "build_requests", build)
    threads = [threading.Thread(target=prep.local_requests, args=(spec, tok, 8, False)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    longer = prep.local_requests(spec, tok, 12, False)
    assert requests_digest(longer) == requests_digest(build_requests(spec, tok, 12))
