#!/usr/bin/env bash
# The system packages tests/integration needs, installed in the background while `make test` sets
# up the venv, lints and runs tests/unit (none of which needs them): scripts/setup_browser.sh, then
# scripts/setup_postgres.sh (one apt-get at a time: both take dpkg's lock). On a fresh machine
# their apt installs take minutes that would otherwise run before the first test.
#
#   setup_system.sh start   begins both in the background and returns at once
#   setup_system.sh wait    waits for them, prints what they printed (stdout and stderr, each to
#                           its own) and exits with their status: setup_browser.sh never fails,
#                           setup_postgres.sh's is kept. Without a `start` before, runs both here.
set -uo pipefail
cd "$(dirname "$0")/.."

DIR=runs/.setup-system  # under runs/: ignored by git, removed by `make clean`

both() { bash scripts/setup_browser.sh; bash scripts/setup_postgres.sh; }

case "${1:-}" in
  start)
    rm -rf "$DIR"
    mkdir -p "$DIR"
    # nohup: the install outlives a closed terminal; its output goes to files, never to make's.
    nohup bash -c "$(declare -f both); both >'$DIR/out' 2>'$DIR/err'; echo \$? >'$DIR/rc.part'; mv '$DIR/rc.part' '$DIR/rc'" \
      </dev/null >/dev/null 2>&1 &
    echo $! >"$DIR/pid"
    ;;
  wait)
    if [ ! -f "$DIR/pid" ]; then
      both
      exit
    fi
    pid=$(cat "$DIR/pid")
    waited=0
    while [ ! -f "$DIR/rc" ] && kill -0 "$pid" 2>/dev/null; do
      sleep 1
      waited=$((waited + 1))
    done
    # Seconds the tests stood idle behind the installs: what moving work ahead of them would save.
    [ "$waited" -gt 0 ] && echo "setup_system: the tests waited ${waited} s for the system packages" >&2
    cat "$DIR/out"
    cat "$DIR/err" >&2
    if [ ! -f "$DIR/rc" ]; then
      echo "setup_system: the background install (pid $pid) ended without its status" >&2
      rc=1
    else
      rc=$(cat "$DIR/rc")
    fi
    rm -rf "$DIR"
    exit "$rc"
    ;;
  *)
    echo "usage: $0 start|wait" >&2
    exit 2
    ;;
esac
