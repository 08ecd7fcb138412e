"""Stop a load stage as soon as its SLO verdict is certain.

Pure: a rule looks at the requests sent so far and says whether the stage has already lost.

* A percentile bound (`ttft_p95_ms@short <= B`) is lost once enough of the stage's planned
  requests are already above B that the percentile must exceed B however the rest turn out:
  with numpy's linear percentile over N values, the q-quantile exceeds B once
  N - floor((N - 1) q) of them do (for p95, more than 5 % of N). Fewer successful requests
  than planned only lowers that count, so counting against the planned N is safe.
  A request still in flight counts as soon as its latency is certain to exceed B: TTFT and
  E2EL once that long has passed since it was sent, TPOT once the time since its first token
  over its remaining decode steps does (`max_tokens` is exact: the client sets `ignore_eos`).
  Such a request is assumed to finish; one that later fails is one the error rate counts.
  A request that failed (or was never answered) is over every bound: it has no latency, and
  the stage's percentile counts it above all it measured (`loadgen.metrics`).
* An error-rate bound is lost once more requests have failed than it allows of the plan.
* The server's waiting queue growing without bound (an open loop above capacity never reaches a
  steady state, statistics.md): over the last window (`window_s`: 15 s, or as long as 30 arrivals
  take at a lower rate, so that it holds more than a burst on any machine), the least-squares slope of
  `vllm:num_requests_waiting` is at least `QUEUE_GROWTH_SHARE` of the offered rate and the
  queue holds more than half the window's arrivals, and at least `QUEUE_MIN_DEPTH` requests (a
  burst's queue drains; this one does not. Measured: gamma bursts at 0.74 req/s queued 5
  requests within 9 s).
Means, ITL (pooled per chunk, so its count is not known in advance) and throughputs have no
certain early verdict and never abort a stage.

Four ways to run a stage (`STOP_RULES`, the scenario's `capacity.early_abort`):

* `certain`: the rules above only.
* `likely`: the rules above, then a stage also stops once a verdict is at least
  `LIKELY` (95 %) probable given what is measured so far. Per SLO, each planned request is over
  its bound (a failure, for the error rate) with an unknown probability p, the same for every
  request of the stage (exchangeable); p has a Jeffreys Beta(1/2, 1/2) prior, updated by the
  requests whose outcome is known (finished, or in flight and already certain to exceed the
  bound, as above). The requests still unknown (in flight, failed, not yet sent) follow the
  Beta-binomial predictive, which gives P(miss) = P(known over + future over >= the count
  that makes the percentile exceed the bound). A request in flight is censored: counted as
  over once it certainly is, otherwise drawn like one not yet sent (which only understates a
  miss). Any SLO with P(miss) >= 95 % stops the stage as a likely miss. A capacity stage
  (never the target stage, whose metrics are the objectives) also stops as a likely pass once
  at least half its planned requests are known and P(some SLO missed) <= 5 % (the sum of the
  SLOs' miss probabilities, Boole's inequality), if every SLO it is held to has a rule here.
  When the percentile sits between two values, the undecided count is taken as a miss for a
  pass and as a pass for a miss: both stops lean to the full stage's verdict.
  And over-saturation, its own reason: over the last window (`window_s`), the waiting queue and
  the TTFT of the requests sent there both climb (least-squares slopes positive at one-sided
  p < `SATURATION_P`), the queue by at least `QUEUE_MIN_DEPTH` / 2 requests and the TTFT by at
  least `SATURATION_MIN_SLOPE` s per s of sending (arrivals 5 % above what is served): the rate
  is above capacity and the stage is measuring its own backlog (as GuideLLM's over-saturation
  stop reads it). The
  stage's start (`settle_s`: 5 s, or 10 arrivals) is left out: an empty server fills up near capacity.
* `decided` (the default): the certain rules, queue runaway and over-saturation as above, and
  the stage's verdict (`objectives.slo_verdict`): at each of the stage's looks
  (`slo_verdict.StageLength`: every slice of its length), each counted SLO is a Clopper-Pearson
  decision on the share of its requests over the bound (failed requests over, requests in
  flight once certainly over), at the scenario's confidence with Bonferroni's correction over
  the looks. A decided violation stops the stage at any look (a miss, its requests in flight
  cut short); from the nominal length on, a look where no SLO is left undecided that the cap
  could still decide stops the sending and lets the requests in flight finish (`Abort.drain`:
  the stage is the one planned to end there, not a cut one). A stage planned to its cap runs on
  while an SLO is undecided. It replaces `likely` as the default: where the likely rule
  predicts the full stage's verdict from its first part (and stops a capacity stage as a
  likely pass at half its length), this one states a decision about the proportion with a
  stated error rate, never calls a pass before the nominal length, and lengthens a stage
  that cannot tell instead of guessing.
* `off`: nothing stops a stage.

Latencies drift within a stage near capacity (the queue builds), which exchangeability ignores:
that makes a likely miss late rather than wrong, and is why a likely pass waits for half the
stage and yields to over-saturation. `tests/unit/objectives/test_stopping_rules.py`
measures the wrong-stop rate on simulated stages; `benchmarks/bench_stopping.py` on stored ones.

Modules: `likely` (the Beta-binomial prediction), `saturation` (queue runaway,
over-saturation), `check` (the certain rules per SLO, the decided rule, and the check a load run
calls), `stop_replay` (a recorded stage asked again). Import from here.
"""

from loadgen import Abort
from objectives.early_abort.check import (
    CERTAIN,
    DECIDED,
    LIKELY,
    OFF,
    PERCENTILE_RULE_FAMILIES,
    STOP_RULES,
    AbortRule,
    ErrorRateRule,
    PercentileRule,
    abort_check,
    decided_verdict,
    rules_for,
    violators_needed,
)
from objectives.early_abort.likely import LIKELY_P, PASS_MIN_KNOWN, PRIOR, Chances, likely_verdict
from objectives.early_abort.saturation import (
    QUEUE_GROWTH_SHARE,
    QUEUE_MIN_DEPTH,
    QUEUE_MIN_SAMPLES,
    QUEUE_WINDOW_REQUESTS,
    QUEUE_WINDOW_S,
    SATURATION_MIN_POINTS,
    SATURATION_MIN_SLOPE,
    SATURATION_P,
    SATURATION_SETTLE_REQUESTS,
    SATURATION_SETTLE_S,
    over_saturated,
    queue_runaway,
    settle_s,
    window_s,
)
from objectives.early_abort.stop_replay import replay, seen_at, waiting_proxy

__all__ = [
    "CERTAIN",
    "DECIDED",
    "LIKELY",
    "LIKELY_P",
    "OFF",
    "PASS_MIN_KNOWN",
    "PERCENTILE_RULE_FAMILIES",
    "PRIOR",
    "QUEUE_GROWTH_SHARE",
    "QUEUE_MIN_DEPTH",
    "QUEUE_MIN_SAMPLES",
    "QUEUE_WINDOW_REQUESTS",
    "QUEUE_WINDOW_S",
    "SATURATION_MIN_POINTS",
    "SATURATION_MIN_SLOPE",
    "SATURATION_P",
    "SATURATION_SETTLE_REQUESTS",
    "SATURATION_SETTLE_S",
    "STOP_RULES",
    "Abort",
    "AbortRule",
    "Chances",
    "ErrorRateRule",
    "PercentileRule",
    "abort_check",
    "decided_verdict",
    "likely_verdict",
    "over_saturated",
    "queue_runaway",
    "replay",
    "rules_for",
    "seen_at",
    "settle_s",
    "violators_needed",
    "waiting_proxy",
    "window_s",
]
