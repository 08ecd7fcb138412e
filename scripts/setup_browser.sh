#!/usr/bin/env bash
# Debian's Chromium for the browser tests (tests/integration/test_browser.py drives it with Playwright's
# Python package; Playwright's own browser download does not work here). Idempotent: a no-op
# once /usr/bin/chromium runs. Never fails `make test` by itself: without Chromium the browser
# tests skip, or fail with the reason when AUTOTUNE_REQUIRE_BROWSER=1 (CI).
set -uo pipefail

CHROMIUM=${AUTOTUNE_CHROMIUM:-/usr/bin/chromium}

works() { "$CHROMIUM" --headless --no-sandbox --disable-gpu --version >/dev/null 2>&1; }

if works; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup_browser: no apt-get here; install Chromium yourself (AUTOTUNE_CHROMIUM=/path/to/chromium)" >&2
  exit 0
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "setup_browser: not root and no passwordless sudo: cannot install chromium" >&2
    exit 0
  fi
fi

echo "setup_browser: installing Debian's chromium (apt-get) ..."
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if $SUDO apt-get update -q >"$log" 2>&1 && $SUDO apt-get install -y -q chromium fonts-liberation >>"$log" 2>&1 && works; then
  echo "setup_browser: $("$CHROMIUM" --version 2>/dev/null)"
else
  echo "setup_browser: installing chromium failed; the browser tests will skip (or fail under AUTOTUNE_REQUIRE_BROWSER=1). Last lines:" >&2
  tail -5 "$log" >&2
fi
rm -f "$log"
exit 0
