"""One study zygote for the session's real vLLM servers, as a study has one for its servers.

A server's zygote is reused while the tuner's environment stays the same (`serving.process.zygote`:
its key is the Python, the environment and the mode), and pytest names the test and its phase in
the environment (PYTEST_CURRENT_TEST, set again at each test's setup, call and teardown). Left
alone, that name would give every test that starts a server a zygote of its own, each importing
vLLM again (7-25 s on the 2-core CPU), which no study pays between its trials. Where a test of
real servers (marker `vllm`) runs its fixtures' setup and its body, the variable holds one value
for them all; it is pytest's again around them, and untouched for every other test.

The zygote is one at a time: a server of another environment replaces it. The top-level files
that start servers here run in file order, those of a staged trial's environment (the dev
endpoint: test_calibration_real_server, test_hang_real_server, test_load_real_server, then
test_lost_zygotes_real, which stops, kills and at last closes the zygote it finds) before those of
a plain start (test_server, test_server_faults, test_server_reconfiguration, test_study_e2e's
exported config): two imports, besides the new zygote the liveness test's retry must import.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

CURRENT_TEST = "PYTEST_CURRENT_TEST"
STEADY = "tests/integration: a test of real vLLM servers"


@contextlib.contextmanager
def steady_current_test(node: pytest.Item | pytest.Collector | None) -> Iterator[None]:
    if node is None or node.get_closest_marker("vllm") is None:
        yield
        return
    was = os.environ.get(CURRENT_TEST)
    os.environ[CURRENT_TEST] = STEADY
    try:
        yield
    finally:
        if was is None:
            os.environ.pop(CURRENT_TEST, None)
        else:
            os.environ[CURRENT_TEST] = was


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    with steady_current_test(getattr(request, "node", None)):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    with steady_current_test(pyfuncitem):
        yield
