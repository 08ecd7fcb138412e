"""`python -m search.cli`: the `autotune` command, as the workers and the tests start it."""

import sys

from search.cli import main

sys.exit(main())
