"""The start anatomy's first token and load warm-up come from the first load run only
(serving.process.FirstTokenWatch).
"""

from loadgen import RequestRecord
from serving.process import FirstTokenWatch


def test_the_watch_keeps_the_first_token_and_first_measured_request_of_the_first_load_run_only():
    def record(first_token: float | None, warmup: bool = False, sent: float = float("nan")) -> RequestRecord:
        return RequestRecord(0, "c", 0.0, 1, 1, warmup=warmup, send_time=sent, first_token_time=first_token)

    watch = FirstTokenWatch(60.0)
    assert watch.first_token_at() is None and watch.first_measured_at() is None
    # as run_load tracks them: the warm-up's records, then the measured ones; then a later stage's
    watch.track([record(None, True, 9.0), record(12.5, True, 9.5)])
    watch.track([record(11.0, sent=10.0), record(None, sent=10.5)])
    watch.track([record(3.0, sent=2.0)])
    assert watch.first_token_at() == 11.0 and watch.first_measured_at() == 10.0
