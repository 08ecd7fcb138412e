"""`python -m app.cli`: the `autotune` command, as the workers and the tests start it."""

import sys

from app.cli import main

sys.exit(main())
