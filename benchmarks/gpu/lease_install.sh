#!/usr/bin/env bash
# The last command of a lease's install: run from the repository's root with the last vLLM part
# and the tuner's wheels carried (.whl/partNN, .whl/tuner), after the earlier parts were copied to
# /tmp/wp one command each (README.md); where the last part and the tuner's wheels together would
# pass a call's 64 MiB, .whl/tuner goes to /tmp/wp/tuner in a command of its own first. Installs
# vLLM into /tmp/site and the tuner's own dependencies into /tmp/site2 (after vLLM's on the path,
# so that vLLM's pins win), and writes /tmp/site2/env.sh, which common.sh sources.
set -euo pipefail
last=$(ls -d .whl/part* | sort | tail -1)
mkdir -p /tmp/wp && cp -r "$last" /tmp/wp/
t0=$(date +%s)
bash "/tmp/wp/${last##*/}/install.sh" /tmp/wp > /tmp/wp/install.log 2>&1 || { tail -20 /tmp/wp/install.log; exit 1; }
tuner=.whl/tuner
[ -d "$tuner" ] || tuner=/tmp/wp/tuner
python3 -m pip install -q --no-index --no-deps --target /tmp/site2 "$tuner"/*.whl
echo 'export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/site2"' > /tmp/site2/env.sh
echo "lease_install: vLLM and the tuner's wheels installed in $(( $(date +%s) - t0 )) s"
