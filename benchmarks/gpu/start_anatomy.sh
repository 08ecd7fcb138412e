#!/usr/bin/env bash
# Where a GPU start's seconds go, before and after (benchmarks/bench_start_anatomy.py says which
# three starts, in which order): the Llama-3-8B shape (configs/models/llama-3-8b.json, dummy
# weights, TP 1), each start followed by the tuner's warm-up and a short load whose TTFT and TPOT
# are printed beside its anatomy. About 5-6 minutes on an H100; BUDGET_S (default 500) bounds it.
# Needs vLLM 0.26 installed under /tmp/site in this lease (../shared/gpu/README.md); not the
# tuner's own wheels. Writes OUT (default runs/gpu/anatomy): start_anatomy.txt, starts.json, each
# start's server.log and the zygote's log.
#   OUT=$OUT bash benchmarks/gpu/start_anatomy.sh
set -euo pipefail
[ -f /tmp/site/vllm_env.sh ] || { echo "start_anatomy: no vLLM under /tmp/site: install it first (../shared/gpu/README.md)" >&2; exit 2; }
. "$(dirname "$0")/common.sh"
OUT=${OUT:-runs/gpu/anatomy}
CACHE=${CACHE:-/tmp/autotune-anatomy-cache}  # emptied first: the first start is the cold one
mkdir -p "$OUT"
rm -rf "$CACHE"
# As the logs of ../shared/gpu/logs/ were taken: FlashInfer's sampler JIT-compiles for about 2
# minutes on a machine's first start, which this lease cannot spare.
export PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-0}
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
echo "start_anatomy: $(date -u +%T) starting (budget ${BUDGET_S:-500} s)"
rc=0
timeout --signal=TERM --kill-after=30 "${BUDGET_S:-500}" python3 -m benchmarks.bench_start_anatomy \
  --model "$MODEL_DIR" --out "$OUT" --cache "$CACHE" --values '{"load_format": "dummy"}' \
  2>&1 | tee "$OUT/start_anatomy.txt" || rc=$?
echo "start_anatomy: $(date -u +%T) exit $rc"
vllm_left "start_anatomy: "
nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader
exit $rc
