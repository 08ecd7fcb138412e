"""The GPU landscape's side-by-side starts (benchmarks/side_by_side.py): the next trials' servers
start together, each trial gets its own, no measurement runs beside a start, and none is left."""

from __future__ import annotations

import threading

import pytest

from benchmarks import side_by_side as sbs
from search.executor import plan_trial
from serving import Failure, FailureClass
from serving.process import ServerFailed
from tests.support.fakes import ctx


class FakeServer:
    """Starts in `start_s` of a wave's barrier: sequential starts would never pass it."""

    def __init__(self, spec, *, alone_on_gpu=True):
        self.spec, self.alone_on_gpu, self.stopped, self.ready_s = spec, alone_on_gpu, False, None
        FakeServer.made.append(self)

    def start(self):
        FakeServer.barrier.wait(timeout=5)
        if "--max-num-seqs" in self.spec.args and self.spec.args[self.spec.args.index("--max-num-seqs") + 1] == "3":
            raise ServerFailed(Failure(FailureClass.OOM, "CUDA out of memory", phase="startup"))
        self.spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.spec.log_path.write_text("served\n")
        self.ready_s = 1.0

    def stop(self, kill=False):
        self.stopped = True


@pytest.fixture
def fake(monkeypatch):
    FakeServer.made = []
    monkeypatch.setattr(sbs, "VllmServer", FakeServer)
    return FakeServer


def _args(c, config):
    return plan_trial(-1, None, {}, config, c, 4096, "test").server_args


def test_the_next_trials_start_together_and_each_trial_takes_its_own(tmp_path, fake):
    c = ctx()
    upcoming = [{"max_num_seqs": n, "memory_utilization": 0.5} for n in (1, 2, 3, 4, 5)]
    pool = sbs.SideBySide(upcoming, 3, 4096, tmp_path / "pool")
    fake.barrier = threading.Barrier(3)  # three starts at once, or a BrokenBarrierError
    first = pool(c, _args(c, upcoming[0]), tmp_path / "trial-0000" / "server.log", startup_timeout_s=60)
    first.start()
    assert [s.alone_on_gpu for s in fake.made] == [False] * 3
    assert (tmp_path / "trial-0000" / "server.log").read_text() == "served\n"  # the trial's log is its server's
    second = pool(c, _args(c, upcoming[1]), tmp_path / "trial-0001" / "server.log", startup_timeout_s=60)
    assert len(fake.made) == 3 and pool.waves == 1  # already started, in the first wave
    second.start()
    third = pool(c, _args(c, upcoming[2]), tmp_path / "trial-0002" / "server.log", startup_timeout_s=60)
    with pytest.raises(ServerFailed, match="out of memory"):  # each start's own failure, for its own trial
        third.start()
    fake.barrier = threading.Barrier(2)
    fourth = pool(c, _args(c, upcoming[3]), tmp_path / "trial-0003" / "server.log", startup_timeout_s=60)
    assert pool.waves == 2 and len(fake.made) == 5  # the rest: 4 and 5
    fourth.start()
    pool.close()  # 5 was never asked for: stopped
    assert fake.made[-1].stopped and not fake.made[3].stopped


def test_a_configuration_a_precheck_rules_out_is_not_started(tmp_path, fake):
    c = ctx()
    upcoming = [
        {"max_num_seqs": 1, "memory_utilization": 0.5},
        {"max_num_seqs": 2, "memory_utilization": 1e-9},
        {"max_num_seqs": 4, "memory_utilization": 0.5},
    ]
    assert plan_trial(-1, None, {}, upcoming[1], c, 4096, "test").problems  # no room for one request's KV cache
    pool = sbs.SideBySide(upcoming, 2, 4096, tmp_path / "pool")
    fake.barrier = threading.Barrier(2)
    pool(c, _args(c, upcoming[0]), tmp_path / "t" / "server.log", startup_timeout_s=60).start()
    assert [
        "--max-num-seqs" in s.spec.args and s.spec.args[s.spec.args.index("--max-num-seqs") + 1] for s in fake.made
    ] == ["1", "4"]


def test_a_server_asked_for_twice_calibration_then_baseline_starts_twice(tmp_path, fake):
    c = ctx()
    defaults, other = {"memory_utilization": 0.5}, {"max_num_seqs": 2, "memory_utilization": 0.5}
    pool = sbs.SideBySide([defaults, other, defaults], 2, 4096, tmp_path / "pool")
    fake.barrier = threading.Barrier(2)
    pool(c, _args(c, defaults), tmp_path / "calibration" / "server.log", startup_timeout_s=60).start()
    pool(c, _args(c, other), tmp_path / "t1" / "server.log", startup_timeout_s=60).start()
    fake.barrier = threading.Barrier(1)
    pool(c, _args(c, defaults), tmp_path / "t2" / "server.log", startup_timeout_s=60).start()
    assert pool.waves == 2 and len(fake.made) == 3
