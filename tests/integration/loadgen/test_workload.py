"""A workload's requests are the same in another process (another PYTHONHASHSEED): built in a
fresh interpreter, they have the same digest.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from loadgen.prompts import build_requests, requests_digest
from loadgen.workload import WorkloadSpec
from tests.support.paths import REPO


def spec(**kw) -> WorkloadSpec:
    data = {"prompt_tokens": 64, "output_tokens": 8, "arrival": {"mode": "poisson", "rate": 5}, "num_requests": 20}
    data.update(kw)
    return WorkloadSpec.model_validate(data)


def test_requests_are_identical_across_processes(tok, tok_dir):
    s = spec(
        endpoint="chat",
        num_requests=25,
        prompt_tokens={"dist": "lognormal", "mean": 80, "std": 30},
        shared_prefix={"fraction": 0.3, "tokens": 10},
    )
    code = textwrap.dedent(f"""
        import json
        from loadgen.prompts import build_requests, requests_digest
        from loadgen.tokenizer import PromptTokenizer
        from loadgen.workload import WorkloadSpec
        s = WorkloadSpec.model_validate(json.loads({s.model_dump_json()!r}))
        print(requests_digest(build_requests(s, PromptTokenizer.load({str(tok_dir)!r}))))
    """)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert out.stdout.strip() == requests_digest(build_requests(s, tok))
