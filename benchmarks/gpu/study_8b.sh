#!/usr/bin/env bash
# mixed on a Llama-3-8B shape (dummy weights) on a GPU with vLLM installed under /tmp/site.
# STUDY, TRIALS, CONFIRM_RUNS as for make search. Resumable: the same command goes on.
set -uo pipefail
. "$(dirname "$0")/common.sh"
STUDY=${STUDY:-gpu-mixed-8b}
python3 - <<'PY'
import pathlib
import yaml
sc = yaml.safe_load(open("configs/mixed.yaml"))
sc["name"] = "mixed-8b"
sc["server"]["fixed"].update(load_format="dummy", tensor_parallel_size=1)
sc["search_space"]["kv_cache_dtype"] = {"choices": ["auto", "fp8"]}
pathlib.Path("runs/gpu").mkdir(parents=True, exist_ok=True)
pathlib.Path("runs/gpu/mixed-8b.yaml").write_text(yaml.safe_dump(sc, sort_keys=False))
PY
python3 -m search.cli search runs/gpu/mixed-8b.yaml --model $MODEL_DIR --study "$STUDY" \
  --trials "${TRIALS:-3}" --confirm-runs "${CONFIRM_RUNS:-0}"
rc=$?
echo "autotune exit $rc"
nvidia-smi --query-gpu=memory.used,memory.total --format=csv
pgrep -fa "vllm|VLLM" || echo "no vLLM process left"
exit $rc
