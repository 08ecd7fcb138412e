"""The study's zygote on a GPU: it forks servers only while it has no CUDA context (a child of a
process with one cannot use CUDA), and refuses to serve once one exists, so that every server is
exec'd instead. A stand-in `torch` says whether CUDA is initialised, a stand-in API server module
answers /health and writes down what it ran with; both go through the real VllmServer, zygote
and entry. Each server runs with vLLM told to fork its EngineCore and with the tuner's plugin."""

import json
import sys

from serving.process import server as server_mod
from serving.process import zygote, zygote_pool
from serving.process.entry.autotune_vllm_plugin import CONCERNS
from serving.process.server import LaunchSpec, VllmServer

FAKE_TORCH = "class cuda:\n    is_initialized = staticmethod(lambda: {initialized})\n"
# A torch whose flag says no context, but whose children cannot use CUDA (a driver initialised
# under the flag, by a device count say).
UNUSABLE_AFTER_FORK = FAKE_TORCH.format(initialized=False) + (
    "def empty(*args, **kwargs):\n    raise RuntimeError('CUDA driver initialized before fork')\n"
)
FAKE_API_SERVER = """
import http.server, json, os, sys
if __name__ == "__main__":
    plugin = sys.modules.get("autotune_vllm_plugin")
    with open(os.environ["RAN_LOG"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "mp": os.environ.get("VLLM_WORKER_MULTIPROC_METHOD"),
                            "plugin": plugin._active if plugin else None}) + "\\n")

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

    port = int(sys.argv[sys.argv.index("--port") + 1])
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def gpu_server(tmp_path, monkeypatch, cuda_initialized: bool, torch: str | None = None) -> tuple[bool, list[dict]]:
    """Whether the server was forked by the zygote, and what its API server ran with."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(torch or FAKE_TORCH.format(initialized=cuda_initialized))
    (tmp_path / "fake_gpu_api_server.py").write_text(FAKE_API_SERVER)
    monkeypatch.setattr(zygote, "ENGINE_MODULES", ["torch"])  # vLLM's, which the stand-in torch would break
    monkeypatch.setattr(zygote, "GPU_WORKER_MODULES", [])
    monkeypatch.setattr(server_mod, "gpu_memory_used_mib", lambda: [])
    server = VllmServer(
        LaunchSpec(
            model=None,
            args=[],
            log_path=tmp_path / "trial" / "server.log",
            python=sys.executable,
            env={"PYTHONPATH": str(tmp_path), "RAN_LOG": str(tmp_path / "ran.log")},
            startup_timeout_s=60,
            gpu=True,
            api_module="fake_gpu_api_server",
        )
    )
    try:
        server.start()
        forked = isinstance(server.proc, zygote.ForkedServer)
    finally:
        server.stop()
        zygote_pool.close()
    return forked, [json.loads(x) for x in (tmp_path / "ran.log").read_text().splitlines()]


def test_a_zygote_with_a_cuda_context_refuses_and_the_server_is_execd(tmp_path, monkeypatch):
    forked, ran = gpu_server(tmp_path, monkeypatch, cuda_initialized=True)
    assert not forked
    log = (tmp_path / "trial" / "server.log").read_text()
    assert "not forked: the study's zygote is gone (exit code 3: autotune zygote: a CUDA context exists" in log
    assert "this server is exec'd" in log
    assert ran == [{"pid": ran[0]["pid"], "mp": "fork", "plugin": list(CONCERNS)}]  # exec'd, as the tuner's server


def test_a_zygote_without_a_cuda_context_forks_the_server(tmp_path, monkeypatch):
    forked, ran = gpu_server(tmp_path, monkeypatch, cuda_initialized=False)
    assert forked
    log = (tmp_path / "trial" / "server.log").read_text()
    assert "forked by the study's zygote" in log and "not forked" not in log
    assert ran == [{"pid": ran[0]["pid"], "mp": "fork", "plugin": list(CONCERNS)}]


def test_a_zygote_whose_children_cannot_use_cuda_refuses_and_the_server_is_execd(tmp_path, monkeypatch):
    forked, ran = gpu_server(tmp_path, monkeypatch, cuda_initialized=False, torch=UNUSABLE_AFTER_FORK)
    assert not forked and len(ran) == 1
    log = (tmp_path / "trial" / "server.log").read_text()
    assert "a process forked from it cannot use CUDA (exit code 1)" in log and "this server is exec'd" in log
