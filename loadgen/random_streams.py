"""The seeded random streams a workload draws from, all in one place.

Every random draw of a load run comes from a generator keyed by (the scenario's seed, a stream's
number, then what indexes the draws within it: a class, a request, a segment). A key names the
same numbers on every machine, in every trial and every run: stage k of two configurations sends
the same requests (common random numbers), and a confirmation run replays the screening's. The
streams' numbers are listed here together so that no two draw alike.
"""

from __future__ import annotations

import numpy as np

MEASURED = 0  # the measured requests' own tokens and lengths
WARMUP = 1  # the warm-up's requests, apart from the measured ones
PREFIX = 2  # a class's shared prefixes
SHAREGPT = 3  # the order a ShareGPT file's exchanges are used in
BURSTS = 7  # the bursty arrival process
TRACE_WINDOW = 11  # where a trace replay's window starts
TRACE_SEGMENT = 12  # a trace's shared segments (hash ids)
CLASS_ORDER = 21  # the offset of the class order's cycle
LENGTH_STRATA = 22  # the start of a class's stratified lengths
SESSION = 30  # a session's own draws: its messages' tokens and think times
SYSTEM_PROMPT = 31  # the shared system prompt's tokens


def seeded(*key: int) -> np.random.Generator:
    """The generator for `key`: (seed, stream, index...)."""
    return np.random.default_rng([int(k) for k in key])
