"""serving describes a server and starts none: importing it, the scenario and the pure calibration
in a fresh interpreter loads no module that starts one.
"""

import subprocess
import sys

from tests.support.paths import REPO

STARTS_A_SERVER = ("serving.process", "search.executor")  # the package: its server, launcher and zygotes


def test_describing_a_server_and_reading_a_calibration_load_nothing_that_starts_one():
    code = (
        "import sys; import serving, search.scenario, search.calibration; "
        f"print(sorted(m for m in sys.modules if m.startswith({STARTS_A_SERVER!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
