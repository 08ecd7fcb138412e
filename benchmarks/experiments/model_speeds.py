"""Built-in models about three times costlier, and three times cheaper, than the default: one CPU
playing a slower and a faster machine, for the measurement that must mean the same on both
(docs/results.md, "One workload on any machine").

Two ways to slow a server on one machine: a CPU quota on its process group (cgroup
`cpu.cfs_quota_us`), or a model that costs more per token. The quota throttles the server in
100 ms slices: it runs at full speed, then stands still, which adds up to tens of milliseconds to
whichever request falls in a pause, a latency pattern no slower machine has. A model of another
shape is uniformly slower or faster at every step, so that is what this builds, from the default
shape (hidden 512, 4 layers, 8 heads of 64; serving/model/local.py), seeded, with the same
tokenizer:

* `x3-costlier`: 768 wide, 6 deep (12 heads, 6 KV heads), about 3.4 times the matmul work;
* `x3-cheaper`: 256 wide, 3 deep (4 heads, 2 KV heads), about a fifth of the matmul work (the
  vocabulary head and vLLM's own step overheads do not shrink with it).

    python -m benchmarks.experiments.model_speeds x3-cheaper      # prints the model's directory
    make search SCENARIO=mixed MODEL=<that directory> STUDY=mixed-fast
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from serving import DEFAULT_MODEL_SPEC, TinyLlamaSpec, build_default_model, default_model_dir

SHAPES: dict[str, TinyLlamaSpec] = {
    "x3-costlier": replace(
        DEFAULT_MODEL_SPEC, hidden_size=768, num_layers=6, num_heads=12, num_kv_heads=6, intermediate_size=2016
    ),
    "x3-cheaper": replace(
        DEFAULT_MODEL_SPEC, hidden_size=256, num_layers=3, num_heads=4, num_kv_heads=2, intermediate_size=672
    ),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shape", choices=list(SHAPES))
    args = parser.parse_args(argv)
    spec = SHAPES[args.shape]
    print(build_default_model(spec, default_model_dir(spec)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
