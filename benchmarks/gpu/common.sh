# Sourced by the GPU scripts beside it: the repository's root as the working directory, vLLM from
# /tmp/site and the tuner's own wheels from /tmp/site2 (README.md), and the Llama-3-8B shape with
# dummy weights in MODEL_DIR, made once.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. /tmp/site/vllm_env.sh
[ -f /tmp/site2/env.sh ] && . /tmp/site2/env.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
MODEL_DIR=runs/models/llama-3-8b
# `autotune model dummy`, without the tuner's CLI (and so without its wheels): serving alone makes it
[ -f $MODEL_DIR/tokenizer.json ] || python3 -c "import sys; from pathlib import Path; from serving import build_dummy_architecture as b; b(Path(sys.argv[1]), Path(sys.argv[2]))" configs/models/llama-3-8b.json $MODEL_DIR
# Any server process left: vLLM's own titles and the tuner's entry and zygote (not a bare "vllm",
# which also matches the command line that ran this script, through vllm_env.sh).
vllm_left() { pgrep -fa "VLLM::|vllm.entrypoints|autotune_vllm_entry|autotune_vllm_zygote" || echo "${1:-}no vLLM process left"; }
