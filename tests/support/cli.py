"""The real `autotune` command, run in a subprocess as a user would."""

import subprocess
import sys

from tests.support.paths import REPO


def autotune(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *map(str, args)], cwd=REPO, capture_output=True, text=True, **kw
    )
