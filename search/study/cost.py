"""What a study will cost on this machine, said before it runs: each stage's requests and seconds,
a trial, the confirmation, the whole study. Pure: from the measurements the calibration resolved.

A stage holds the same requests on every machine (`objectives.stages.plan`); what the machine
changes is the time they take, requests / rate at the rate the calibration set. So after
calibration (or from a stored one, `autotune search --dry-run`) the study can say: "this machine
serves 1.47 req/s; the target stage sends 140 requests at 0.59 req/s, about 240 s; a trial about
6 min; 10 trials and the confirmation about 95 min". The model, and what it leaves out:

* a stage: its planned requests at its rate (capped at the workload's `duration_s`), then the
  drain of its last requests (the slowest class's unloaded latency) and the next stage's drain
  and reset (`BETWEEN_STAGES_S`); the decided rule's run-on and early stops are not predicted;
* a screened trial: a server start and stop (`START_STOP_S`), its warm-up, the target stage, and,
  for the share of trials expected to pass the target (`PASS_SHARE`), `SEARCH_STAGES` capacity
  stages at the geometric mean of the target rate and the calibrated saturation throughput
  (where the capacity searches of a passing configuration go);
* a confirmation run: the same with the target stage in full and capacity stages each halfway
  from its planned requests to its cap (near a bound they stay undecided and run on, while a
  clear miss stops early). Once the candidates are known, at the rates their searches left them
  (`ConfirmationRunCost`): `CONFIRM_STAGES` of them near a bracket found, or, for a candidate
  that missed at the target, every stage down toward the search's floor, unless it is a
  baseline whose search stops once the others beat it (its target stage alone). Before the
  search, a front member is of the first kind (it met the target in its screen), a baseline
  that stops once beaten `PASS_SHARE` of the first kind and the rest its target stage alone,
  any other candidate `PASS_SHARE` of the first kind and the rest of the second.

The constants come from measured studies (docs/results.md, "Study plans"); the study prints what
its plan said beside what it took, so a machine the model misjudges shows it. Once trials and
confirmation runs have run, their measured lengths replace the plan's (`search.study.pace`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from loadgen import MetricName, WorkloadSpec
from objectives.stages import StageSize
from search.calibration import CalibrationResult
from search.executor import Measurement

# A server start and stop: on the CPU a start forked by the study's zygote (about 4 s, the first
# one paying the zygote's imports) and its stop; on a GPU a warm start with the tuner's plugin
# (about 21 s on an H200) and its stop.
START_STOP_S = {False: 8.0, True: 35.0}
BETWEEN_STAGES_S = 1.5  # the drain poll and the prefix-cache reset before a capacity stage
REQUEST_BUILD_S = 2.0  # a run's request bodies prepared, the warm-up's connections opened
PASS_SHARE = 0.5  # of screened trials, those expected to meet the SLOs at the target and search up
SEARCH_STAGES = 2.0  # capacity stages a passing screened trial runs, on average
CONFIRM_STAGES = 3.5  # ... a confirmation run (the full search, up or down)


@dataclass(frozen=True)
class StageCost:
    kind: str
    rate: float
    requests: int
    seconds: float
    capped: bool

    def text(self) -> str:
        capped = " (capped by workload.duration_s)" if self.capped else ""
        return (
            f"{self.kind} stage: {self.requests} requests at {self.rate:.3g} req/s, about {self.seconds:.0f} s{capped}"
        )


@dataclass(frozen=True)
class ConfirmationRunCost:
    """One confirmation run of a candidate, planned from where its search left its capacity: a
    server start, the warm-up and the target stage in full (`fixed_s`), then capacity stages,
    each halfway from its planned requests to its cap (near a bound they run on undecided).

    Where they run decides their length, requests / rate. A candidate whose search bracketed its
    capacity (a rate met) looks there first: `CONFIRM_STAGES` stages at the bracket. One that
    missed at the target searches down toward the floor through every stage, planned at the
    geometric mean of the target and the floor (half the target at a quarter floor): on a slow
    machine such candidates' capacities lay at a quarter to a third of the target, and each of
    their stages took three to four times one at the target (docs/results.md, "Study plans")."""

    fixed_s: float
    stage_requests: int
    target_rps: float
    floor_rps: float
    max_stages: int
    cap_s: float | None
    drain_s: float
    # Where a configuration that meets the target searches its capacity: the geometric mean of the
    # target and the calibrated saturation throughput, as a screened trial's (None: the target).
    near_rps: float | None = None

    def _stages_s(self, count: float, rate: float) -> float:
        stage = _stage("capacity", self.stage_requests, rate, self.cap_s, self.drain_s)
        return count * (stage.seconds + BETWEEN_STAGES_S)

    def seconds(
        self,
        met_rps: float | None = None,
        violated_rps: float | None = None,
        beaten_at: float | None = None,
        meets: bool | None = None,
    ) -> float:
        """A run of a candidate whose search met the SLOs at `met_rps` and missed them at
        `violated_rps` (either None where it found none); neither: a candidate not yet searched.
        Nothing yet says whether it meets the target, so it is planned as `PASS_SHARE` of a
        candidate near the target and the rest of one that searches down: planned near the target
        alone, the plan said 13 min for two runs that took 23 on the faster CPU, and 61 for three
        that took about 112 on the slow one, where each baseline searched down. A baseline whose
        search stops where the others beat it (`search.study.baseline_stop`) and whose
        screen missed there measures its target stage, and its bracket's two rates where it had
        one (a confirmation run looks there first), and stops. `meets` prices a candidate not yet
        searched as one that meets the target (True) or misses it (False) instead of the blend."""
        stages = min(CONFIRM_STAGES, float(self.max_stages))
        if beaten_at is not None and violated_rps is not None and violated_rps <= beaten_at:
            return self.fixed_s + (self._stages_s(2, math.sqrt(met_rps * violated_rps)) if met_rps else 0.0)
        near_target = self.fixed_s + self._stages_s(stages, self.target_rps)
        searched_down = self.fixed_s + self._stages_s(self.max_stages, math.sqrt(self.target_rps * self.floor_rps))
        if met_rps:
            return self.fixed_s + self._stages_s(stages, math.sqrt(met_rps * (violated_rps or met_rps)))
        if violated_rps is not None:  # it met no rate, not even the target's: down from there
            return searched_down
        share = PASS_SHARE if meets is None else float(meets)
        return share * near_target + (1.0 - share) * searched_down

    def front_seconds(self) -> float:
        """A front member's run before the search: it met the SLOs at the target in its screen, so
        its capacity stages bracket a capacity above it, where a screened trial's search goes
        (`near_rps`). The studies of docs/results.md ("Confirmation runs that stop once beaten"):
        the pick's runs took 3.2-4.7 min at full speed, planned 5.2."""
        rate = self.near_rps or self.target_rps
        return self.fixed_s + self._stages_s(min(CONFIRM_STAGES, float(self.max_stages)), rate)

    def baseline_seconds(self, meets: bool | None = None) -> float:
        """A baseline's run before the search, whose search stops once the other candidates beat
        it: `PASS_SHARE` of a front member's run (it meets the target and searches above it), the
        rest its target stage alone (it misses there and stops: the others, feasible at the target,
        carry more). `meets`: the one case or the other instead of the blend."""
        share = PASS_SHARE if meets is None else float(meets)
        return share * self.front_seconds() + (1.0 - share) * self.fixed_s

    def round_s(self, shares: tuple[float, float], meets: bool | None = None) -> float:
        """A confirmation run on average over the candidates: `shares` of them front members and
        baselines whose search stops once beaten (`search.study.baseline_stop.run_shares`), the
        rest candidates not yet searched; `meets`: the baselines' case (None: the blend)."""
        front, stopped = shares
        return (
            front * self.front_seconds()
            + stopped * self.baseline_seconds(meets)
            + (1.0 - front - stopped) * self.seconds(meets=meets)
        )


@dataclass(frozen=True)
class StudyCost:
    size: StageSize | None
    capacity_rps: float | None  # the calibrated saturation throughput
    target: StageCost | None
    capacity_stage: StageCost | None  # a typical one
    trial_s: float
    confirmation_run_s: float
    confirmation_runs: int  # candidates x runs
    trials: int
    confirmation: ConfirmationRunCost | None = None  # a candidate's run, once its search is known
    # A confirmation run on average if every baseline misses the SLOs at the target, and if every
    # one meets them: the plan's least certain part, which the baselines' screens settle (None:
    # no baseline to settle it, or already screened).
    baseline_cases: tuple[float, float] | None = None

    def total_if(self, run_s: float) -> float:
        """The study's length with a confirmation run of `run_s` on average."""
        return self.search_s + self.confirmation_runs * run_s

    def rescreened_confirmation_s(self, round_s: float, candidates: int) -> float:
        """The confirmation's length at `round_s` a round of its `candidates` (one run each)."""
        return round_s * self.confirmation_runs / candidates

    def rescreened_s(self, elapsed_s: float, trials_left: int, round_s: float, candidates: int) -> float:
        """The study's length said again once the baselines are screened: `elapsed_s` since the
        plan, the `trials_left` at the plan's length of a trial, and the confirmation at `round_s`
        a round of its `candidates`."""
        return elapsed_s + trials_left * self.trial_s + self.rescreened_confirmation_s(round_s, candidates)

    def screened_baselines(self, trials_ran: int, baselines: int) -> StudyCost:
        """The plan once `trials_ran` trials have run: the baselines are a study's first trials, so
        once as many have run, their screens have said which case holds and the plan gives none."""
        return replace(self, baseline_cases=None) if trials_ran >= baselines else self

    @property
    def search_s(self) -> float:
        return self.trials * self.trial_s

    @property
    def confirmation_s(self) -> float:
        return self.confirmation_runs * self.confirmation_run_s

    @property
    def total_s(self) -> float:
        return self.search_s + self.confirmation_s

    def trials_within(self, budget_s: float) -> int:
        """How many trials fit `budget_s` beside the confirmation (0: not even the confirmation)."""
        if not math.isfinite(self.trial_s) or self.trial_s <= 0:
            return self.trials
        return max(0, math.floor((budget_s - self.confirmation_s) / self.trial_s))

    def within(self, budget_s: float) -> BudgetedPlan:
        """The plan a wall-time budget of `budget_s` leaves: the trials that fit beside the
        confirmation. A confirmation with nothing screened to confirm is no study: where it does
        not fit beside a single trial, the budget goes to the search, and the confirmation can
        follow later with a budget of its own."""
        cost = self
        dropped = bool(cost.confirmation_runs) and cost.trials > 0 and cost.trials_within(budget_s) == 0
        if dropped:
            cost = replace(cost, confirmation_runs=0)
        fit = min(cost.trials, cost.trials_within(budget_s))
        return BudgetedPlan(replace(cost, trials=fit), asked=self.trials, confirmation_dropped=dropped)

    def lines(self) -> list[str]:
        out = []
        if self.capacity_rps:
            out.append(f"this machine serves {self.capacity_rps:.3g} req/s (the calibrated saturation throughput)")
        if self.size is not None:
            out.append(self.size.text())
        out += [s.text() for s in (self.target, self.capacity_stage) if s is not None]
        if not math.isfinite(self.trial_s):
            out.append(
                "plan: a trial's length is not known before the first one (its load runs at the server's own "
                "pace); the progress lines say what each took"
            )
            return out
        confirm = (
            f" and the confirmation ({self.confirmation_runs} runs, about {self.confirmation_s / 60:.0f} min)"
            if self.confirmation_runs
            else ""
        )
        out.append(
            f"plan: a trial about {self.trial_s / 60:.1f} min; {self.trials} trials{confirm}: about "
            f"{self.total_s / 60:.0f} min"
        )
        if self.confirmation_runs and self.baseline_cases is not None:
            miss, meet = (self.total_if(s) / 60 for s in self.baseline_cases)
            if round(miss) != round(meet):
                out.append(
                    f"plan: about {miss:.0f} min if the baselines miss the SLOs at the target, {meet:.0f} if "
                    "they meet them; their screens, the study's first trials, say which, and the study says "
                    "its length again then"
                )
        return out


@dataclass(frozen=True)
class BudgetedPlan:
    """A plan within a wall-time budget (`StudyCost.within`)."""

    cost: StudyCost  # its trials: those that fit; its confirmation runs: none where dropped
    asked: int  # the trials the plan had before the budget
    confirmation_dropped: bool

    @property
    def trimmed(self) -> bool:
        return self.cost.trials < self.asked


def _drain_s(cal: CalibrationResult | None, workload: WorkloadSpec) -> float:
    """How long a stage's last requests take after its sending ends: the slowest class's unloaded
    end-to-end latency (a loaded server takes longer; the run-on and early stops even it out).
    A session workload's stage ends with its last session: its turns and the pauses between them
    go on after the last session started."""
    latency = 1.0
    if cal is not None:
        values = [
            v / 1000.0
            for k, v in cal.unloaded.items()
            if v is not None and MetricName.parse(k).base == "e2el_median_ms" and math.isfinite(v)
        ]
        latency = max(values, default=1.0)
    sessions = workload.sessions
    if sessions is None:
        return latency
    turns = sessions.mean_turns()
    return turns * latency + (turns - 1) * sessions.think_time_s.mean_s


def _stage(kind: str, requests: int, rate: float, cap_s: float | None, drain_s: float) -> StageCost:
    sending = requests / rate
    if cap_s is not None and sending > cap_s:
        return StageCost(kind, rate, requests, cap_s + drain_s, True)
    return StageCost(kind, rate, requests, sending + drain_s, False)


def study_cost(
    screened: Measurement,
    full: Measurement,
    cal: CalibrationResult | None,
    *,
    trials: int,
    confirmation_runs: int,
    gpu: bool = False,
    shares: tuple[float, float] = (0.0, 0.0),
) -> StudyCost:
    """The plan of a study of `trials` screened trials and `confirmation_runs` confirmation runs:
    `shares` of them a front member's (`ConfirmationRunCost.front_seconds`) and a baseline's
    whose search stops once the others beat it (`baseline_seconds`); the rest are planned as a
    candidate not yet searched (`seconds`)."""
    start = START_STOP_S[gpu]
    drain = _drain_s(cal, screened.workload)
    warmup = REQUEST_BUILD_S + (drain if screened.workload.warmup_requests else 0.0)
    rate = screened.workload.arrival.mean_rate()
    size = screened.stage_size()
    cap_s = screened.workload.duration_s
    if size is None or rate is None or screened.capacity is None:  # one load run, as the workload states it
        load = screened.planned_s()  # None: a closed loop, at the server's own pace
        trial = start + warmup + load + drain if load is not None else math.nan
        return StudyCost(size, cal.capacity_rps if cal else None, None, None, trial, trial, confirmation_runs, trials)
    saturation = cal.capacity_rps if cal is not None and cal.capacity_rps > 0 else rate / 0.5
    target = _stage("target", size.requests, rate, cap_s, drain)
    searched = _stage("capacity", size.requests, math.sqrt(rate * max(rate, saturation)), cap_s, drain)
    between = searched.seconds + BETWEEN_STAGES_S
    stages = min(SEARCH_STAGES, float(screened.capacity.max_stages))
    trial = start + warmup + target.seconds + PASS_SHARE * stages * between
    full_target = _stage("target", full.target_requests or size.requests, rate, cap_s, drain)
    run = ConfirmationRunCost(
        fixed_s=start + warmup + full_target.seconds,
        stage_requests=math.ceil((size.requests + size.most) / 2),
        target_rps=rate,
        floor_rps=full.capacity.floor(rate, cap_s) if full.capacity else rate,
        max_stages=full.capacity.max_stages if full.capacity else 0,
        cap_s=cap_s,
        drain_s=drain,
        near_rps=searched.rate,
    )
    return StudyCost(
        size,
        cal.capacity_rps if cal else None,
        target,
        searched,
        trial,
        run.round_s(shares),
        confirmation_runs,
        trials,
        run,
        baseline_cases=(run.round_s(shares, meets=False), run.round_s(shares, meets=True)),
    )
