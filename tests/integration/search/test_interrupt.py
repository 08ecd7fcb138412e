"""An interrupt (SIGTERM or Ctrl-C) that lands while a load runs on the stub ends the run with one
KeyboardInterrupt, its requests cancelled and awaited: nothing is logged after it (asyncio's
"Task exception was never retrieved" once printed a traceback under the tuner's clean line).
How run_async routes the signals is tested in tests/unit/loadgen/test_event_loop.py."""

from __future__ import annotations

import gc
import math
import signal

import pytest

from loadgen import LoadOptions
from loadgen.event_loop import run_async
from loadgen.loadrun import run_load
from loadgen.stall import ProgressWatch
from loadgen.workload import WorkloadSpec
from serving.process import while_serving
from tests.support.stub_server import StubConfig, StubServer


class _LiveStub:
    """What while_serving asks of a server, for a stub that never dies."""

    def poll_failure(self, phase: str):
        return None

    def processes_stopped(self) -> bool:
        return False


def _raise_interrupt(signum, frame):  # as the study loop's SIGTERM handler
    raise KeyboardInterrupt


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupt_inside_a_running_load_ends_it_with_one_keyboard_interrupt(
    tok_dir, tok, caplog, capfd, loop, signum
):
    pytest.importorskip(loop)
    spec = WorkloadSpec.model_validate(
        {
            "endpoint": "completions",
            "prompt_tokens": 20,
            "output_tokens": 50,
            "arrival": {"mode": "constant", "rate": 20},
            "duration_s": 30,
            "seed": 1,
        }
    )
    watch = ProgressWatch(60.0)

    def interrupt_with_requests_in_flight(records, now, samples):
        # Delivered here, the handler runs inside the load's own task (the race the loop's handlers avoid).
        if any(not math.isnan(r.send_time) for r in records):
            signal.raise_signal(signum)

    gc.collect()  # what earlier tests left behind is reported now, not below
    caplog.clear()
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with StubServer(StubConfig(ttft_ms=50, itl_ms=50, root=str(tok_dir)), tok) as s:
            with pytest.raises(KeyboardInterrupt):
                run_async(
                    while_serving(
                        _LiveStub(),
                        run_load(
                            s.base_url,
                            None,
                            spec,
                            options=LoadOptions(
                                tokenizer_path=tok_dir, abort=interrupt_with_requests_in_flight, watch=watch
                            ),
                        ),
                        "load",
                        watch,
                    ),
                    loop,
                )
            gc.collect()  # a task left holding the interrupt is reported when it is collected
    finally:
        signal.signal(signal.SIGTERM, previous)
    sent = [r for r in watch.current if not math.isnan(r.send_time)]
    assert sent and all(not math.isnan(r.end_time) for r in sent)  # every request let go of
    assert _unretrieved(caplog) == []
    assert capfd.readouterr().err == ""


def _unretrieved(caplog) -> list[str]:
    """What asyncio reported about tasks whose exception nobody saw (the stub, on its own loop,
    may log its dropped streams or handlers it left pending when it stopped: not these)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "asyncio"
        and (
            "never retrieved" in r.getMessage()
            or "shutdown" in r.getMessage()
            or (r.exc_info and r.exc_info[0] is KeyboardInterrupt)
        )
    ]
