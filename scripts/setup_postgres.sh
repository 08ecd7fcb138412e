#!/usr/bin/env bash
# Debian's PostgreSQL server for `make db` and the PostgreSQL tests. Idempotent: a no-op once
# initdb is found (storage/local_postgres.py looks in /usr/lib/postgresql/*/bin, then PATH).
set -uo pipefail

if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup_postgres: no apt-get here; install PostgreSQL's server yourself (AUTOTUNE_PG_BINDIR=/path/to/bin)" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "setup_postgres: not root and no passwordless sudo: install the postgresql package yourself" >&2
    exit 1
  fi
fi
echo "setup_postgres: installing Debian's postgresql ..."
$SUDO apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
