#!/usr/bin/env bash
# A small landscape of mixed on a Llama-3-8B shape (dummy weights) on one GPU with vLLM installed
# under /tmp/site (README.md beside this file), sized for a 15-minute lease: eager servers, the KV
# cache pinned in bytes so that SIDE servers start side by side (benchmarks/side_by_side.py), a
# shortened screening (10 s target stage, up to 2 capacity stages of 4 s). N design points + both
# baselines; SIDE defaults to what the GPU's memory holds (weights, activations and KV_GIB each).
# Writes the study and its export to OUT. RESUME=FILE.db.gz goes on from a stored study (the
# H200 one: benchmarks/data/landscape-mixed-8b-h200.db.gz, 10 of 14 design points measured; its
# calibration is reused, and a study from another GPU or vLLM build is refused, one line).
#   N=14 KV_GIB=6 BUDGET_S=420 OUT=/tmp/out benchmarks/gpu/landscape_8b.sh
#   RESUME=benchmarks/data/landscape-mixed-8b-h200.db.gz BUDGET_S=600 benchmarks/gpu/landscape_8b.sh
set -uo pipefail
. "$(dirname "$0")/common.sh"
export PYTHONUNBUFFERED=1
OUT=${OUT:-runs/gpu/out}; mkdir -p "$OUT" runs/gpu
STORAGE=sqlite:///runs/gpu/landscape.db
if [ -n "${RESUME:-}" ] && [ ! -e runs/gpu/landscape.db ]; then gunzip -c "$RESUME" > runs/gpu/landscape.db; fi
KV_GIB=${KV_GIB:-6}
TOTAL_GIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{print $1 / 1024}')
SIDE=${SIDE:-$(awk -v t="$TOTAL_GIB" -v kv="$KV_GIB" 'BEGIN {print int(0.9 * t / (17.5 + kv))}')}
echo "GPU ${TOTAL_GIB} GiB: ${SIDE} servers side by side, ${KV_GIB} GiB of KV cache each"
KV_GIB=$KV_GIB python3 - <<'PY'
import os, pathlib
import yaml
sc = yaml.safe_load(open("configs/mixed.yaml"))
sc["name"] = "mixed-8b-landscape"
pinned = {"memory_utilization": 0.16, "kv_cache_memory_bytes": int(float(os.environ["KV_GIB"]) * 2**30),
          "enforce_eager": True}
sc["server"]["fixed"].update(load_format="dummy", tensor_parallel_size=1, **pinned)
del sc["search_space"]["memory_utilization"]  # pinned: servers share the GPU
for b in sc["baselines"].values():
    b.update(pinned)
sc["calibration"] = {"repeats": 1}
sc["screening"] = {"duration_s": 10, "max_stages": 2}
sc["capacity"]["stage_s"] = 4
pathlib.Path("runs/gpu/mixed-8b-landscape.yaml").write_text(yaml.safe_dump(sc, sort_keys=False))
PY
timeout --signal=TERM "${BUDGET_S:-420}" python3 -m benchmarks.bench_landscape record --scenario runs/gpu/mixed-8b-landscape.yaml \
  --model $MODEL_DIR --n "${N:-14}" --runs 1 --repeats 0 --side-by-side "$SIDE" --storage $STORAGE 2>&1 | tee "$OUT/record.log"
echo "record exit ${PIPESTATUS[0]}"
python3 -m benchmarks.bench_landscape export --storage $STORAGE --study landscape-mixed-8b-landscape \
  --out "$OUT/landscape-mixed-8b-gpu.json" \
  --recorded-with "N=${N:-14} SIDE=$SIDE KV_GIB=$KV_GIB benchmarks/gpu/landscape_8b.sh" 2>&1 | tail -3
cp runs/gpu/landscape.db "$OUT/" 2>/dev/null
tar czf "$OUT/logs.tgz" runs/landscape-mixed-8b-landscape runs/gpu/mixed-8b-landscape.yaml 2>/dev/null
nvidia-smi --query-gpu=memory.used,memory.total --format=csv
vllm_left
