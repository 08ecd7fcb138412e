"""A built-in model about three times costlier than the default: a slower server for the same CPU.

The measurement must mean the same on a machine three times slower (docs/results.md, "One
workload on any machine"). Two ways to have one here: a CPU quota on the server's process group
(cgroup `cpu.cfs_quota_us`), or a model that costs three times as much per token. The quota
throttles the server in 100 ms slices: it runs at full speed, then stands still, which adds up to
tens of milliseconds to whichever request falls in a pause, a latency pattern no slower machine
has. A costlier model is uniformly slower at every step, so that is what this builds: the default
shape (hidden 512, 4 layers, 8 heads; serving/model/local.py) made 768 wide and 6 deep (12 heads of
64, 6 KV heads), about 3.4 times the matmul work per token. Built the same way, seeded, with the
same tokenizer.

    python -m benchmarks.experiments.slow_model          # prints the model's directory
    make search SCENARIO=mixed MODEL=<that directory> STUDY=mixed-slow
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from serving.model.local import DEFAULT_SPEC, build, default_model_dir

SLOW_SPEC = replace(DEFAULT_SPEC, hidden_size=768, num_layers=6, num_heads=12, num_kv_heads=6, intermediate_size=2016)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    print(build(SLOW_SPEC, default_model_dir(SLOW_SPEC)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
