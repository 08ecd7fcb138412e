"""How the tuner starts a server on a GPU: forked by the study's zygote without the CPU build's
forkserver, vLLM told to fork its EngineCore, the zygote importing the GPU worker's modules
(after its probe); the unmodified start (the benchmarks' "before") does none of it."""

import pytest

from serving.process import zygote
from serving.process.server import LaunchSpec


@pytest.mark.parametrize("gpu, mode", [(True, zygote.FORK), (False, zygote.FORKSERVER)])
def test_a_gpu_server_is_forked_without_a_forkserver_and_its_engine_forked_by_vllm(gpu, mode, tmp_path):
    spec = LaunchSpec(model=None, args=[], log_path=tmp_path / "s.log", gpu=gpu)
    assert spec.forked_by_zygote and spec.children == mode
    assert ("VLLM_WORKER_MULTIPROC_METHOD" in spec.tuner_env()) is gpu
    assert zygote.preload(mode)[1] == (zygote.GPU_WORKER_MODULES if gpu else [])
    unmodified = LaunchSpec(
        model=None, args=[], log_path=tmp_path / "s.log", gpu=gpu, zygote=False, plugin=False, fork_engine=False
    )
    unmodified.warm_children = False
    assert not unmodified.forked_by_zygote and unmodified.tuner_env() == {}
    assert "autotune_vllm_entry" not in unmodified.command(port=1)[2]
