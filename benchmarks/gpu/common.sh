# Sourced by the GPU scripts beside it: the repository's root as the working directory, vLLM from
# /tmp/site and the tuner's own wheels from /tmp/site2 (README.md), and the Llama-3-8B shape with
# dummy weights in MODEL_DIR, made once.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. /tmp/site/vllm_env.sh
[ -f /tmp/site2/env.sh ] && . /tmp/site2/env.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
MODEL_DIR=runs/models/llama-3-8b
[ -f $MODEL_DIR/tokenizer.json ] || python3 -m search.cli model dummy --config configs/models/llama-3-8b.json --out $MODEL_DIR
