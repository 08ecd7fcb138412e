#!/usr/bin/env bash
# mixed on a Llama-3-8B shape (dummy weights) on a GPU with vLLM installed under /tmp/site, one
# study across as many leases as it takes: each lease adds trials until the confirmation is done.
# The study's database and the servers' compile and JIT caches travel between leases in CARRY
# (a folder: study.db.gz and cache.tgz.NN, parts of at most 15 MiB, so that each comes back
# from the device tool, which returns files of at most 16 MiB): restored from CARRY_IN when
# given, packed into OUT/carry at the end of the lease, whatever ended it. A study resumes on any
# machine with the same GPU model and vLLM build (its fingerprint is those, not the host).
#   STUDY, TRIALS, CONFIRM_RUNS as for make search; BUDGET_S (default 660) bounds this lease's
#   search; OUT (default runs/gpu/out); CARRY_IN=DIR (the last lease's OUT/carry, brought back).
set -uo pipefail
. "$(dirname "$0")/common.sh"
STUDY=${STUDY:-gpu-mixed-8b}
OUT=${OUT:-runs/gpu/out}
DB=runs/gpu/study.db
export AUTOTUNE_CACHE_DIR=${AUTOTUNE_CACHE_DIR:-/tmp/autotune-cache}
mkdir -p runs/gpu "$OUT/carry" "$AUTOTUNE_CACHE_DIR"
if [ -n "${CARRY_IN:-}" ]; then
  [ -e "$DB" ] || { [ -f "$CARRY_IN/study.db.gz" ] && gunzip -c "$CARRY_IN/study.db.gz" > "$DB"; }
  if ls "$CARRY_IN"/cache.tgz.* >/dev/null 2>&1; then
    cat "$CARRY_IN"/cache.tgz.* | tar xzf - -C "$AUTOTUNE_CACHE_DIR"
  fi
  echo "study_8b: restored from $CARRY_IN: $(du -sh "$DB" 2>/dev/null | cut -f1) database, $(du -sh "$AUTOTUNE_CACHE_DIR" | cut -f1) cache"
fi
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
timeout --signal=TERM --kill-after=60 "${BUDGET_S:-660}" python3 -m app.cli search runs/gpu/mixed-8b.yaml \
  --model $MODEL_DIR --study "$STUDY" --storage "sqlite:///$DB" \
  --trials "${TRIALS:-3}" --confirm-runs "${CONFIRM_RUNS:-0}"
rc=$?
echo "autotune exit $rc"
# What the next lease needs: the study and the caches (not the models: common.sh makes them again).
rm -f "$OUT"/carry/cache.tgz.*
[ -f "$DB" ] && gzip -c "$DB" > "$OUT/carry/study.db.gz"
tar czf - -C "$AUTOTUNE_CACHE_DIR" --exclude=./models . | split -b 15m -d -a 2 - "$OUT/carry/cache.tgz."
du -sh "$OUT"/carry/*
nvidia-smi --query-gpu=memory.used,memory.total --format=csv
vllm_left
exit $rc
