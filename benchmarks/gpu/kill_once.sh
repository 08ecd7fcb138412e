#!/usr/bin/env bash
# kill_once.sh TRIAL SECONDS: SIGKILL trial TRIAL's engine once, SECONDS after its server served.
set -uo pipefail
cd "$(dirname "$0")/../.."
STUDY=${STUDY:-gpu-mixed-8b}
log=runs/$STUDY/trial-$(printf %04d "$1")/server.log
until grep -q "Application startup complete" "$log" 2>/dev/null; do sleep 1; done
sleep "$2"
echo "kill_once: GPU memory before: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
echo "kill_once: SIGKILL VLLM::EngineCore of trial $1 at $(date -u +%T.%N)"
pkill -9 -f "VLLM::EngineCore" || echo "kill_once: no EngineCore found"
sleep 20
echo "kill_once: GPU memory 20 s after: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
