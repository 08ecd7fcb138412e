"""A started server hands its start's anatomy over with its stop report, the first token
included (a fake `python` that logs vLLM's milestone lines and answers /health stands in for
vLLM, started through the real guard and process group)."""

import sys

import pytest

from serving.process.server import LaunchSpec, VllmServer

FAKE_VLLM = """#!{python}
import http.server, sys, time
def log(proc, text):
    print(f"({{proc}} pid=1) INFO {{time.strftime('%m-%d %H:%M:%S')}} [x.py:1] {{text}}", flush=True)
log("APIServer", "non-default args")
time.sleep(2.0)
log("EngineCore", "Initializing a V1 LLM engine (v0.32.0) with config")
log("Worker", "Starting to load model m...")
log("Worker", "Loading weights took 0.03 seconds")
log("EngineCore", "CPU KV cache size: 65,536 tokens")
log("EngineCore", "init engine (profile, create kv cache, warmup model) took 0.12 s")
port = int(sys.argv[sys.argv.index("--port") + 1])
log("APIServer", f"Starting vLLM server on http://127.0.0.1:{{port}}")
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def test_a_started_server_reports_its_start_anatomy_when_stopped(tmp_path):
    python = tmp_path / "python"
    python.write_text(FAKE_VLLM.format(python=sys.executable))
    python.chmod(0o755)
    server = VllmServer(
        LaunchSpec(
            model=None,
            args=[],
            log_path=tmp_path / "server.log",
            python=str(python),
            startup_timeout_s=30,
            zygote=False,
        )
    )  # the fake cannot run the zygote
    server.start()
    report = server.stop()
    anatomy = report.start_anatomy
    # the client that loads it adds the first token and the load's warm-up; the fake logs no
    # model config, compile, kernel warm-up or capture line
    assert anatomy.missing == [
        "model config",
        "compile",
        "kernel warm-ups",
        "CUDA graphs",
        "first token",
        "load warm-up",
    ]
    assert sum(s for s in anatomy.phases.values() if s is not None) == pytest.approx(server.ready_s, abs=0.02)
    # the fake's 2 s sleep lands in the engine-process phase, not in the import before it (the
    # import's own length is the interpreter's start: no bound holds on a loaded machine)
    assert anatomy.phases["engine process"] >= 1.5
    assert anatomy.reported == {"weights_s": 0.03, "engine_init_s": 0.12}
    assert anatomy.with_first_token(0.3).as_dict()["phases"]["first token"] == 0.3
