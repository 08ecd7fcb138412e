"""A scripted world for the confirmation phase (tests/fixtures/scenarios/loop_confirm.yaml):
max_num_seqs 16, 8 and 4 enqueued in that order (trials 0-2), then the vllm_defaults baseline
(trial 3). The search measures `search_ttft` where given (a lucky outlier, say), else the truth;
each confirmation run measures the truth times its round's drift, alike for every candidate.
"""

from __future__ import annotations

from loadgen import CLIENT_BEHIND
from search.executor import TrialOutcome
from serving import Failure, FailureClass
from storage.tables import TrialStatus

ROUND_DRIFT = (-0.02, 0.0, 0.02)
ORDER = (16, 8, 4)
BASELINE = 3  # the baseline's trial number, after the three enqueued ones
TRUTH = {None: 1000.0, 4: 900.0, 8: 600.0, 16: 700.0}  # None: the baseline (vLLM's default)
LUCKY_16 = {16: 400.0}  # one good draw: the search's winner, 300 ms better than 16 really is
SEARCH_THROUGHPUT = {None: 99.0, 4: 102.0, 8: 101.0, 16: 100.0}  # all on the front but the baseline


def confirmation_round(plan) -> int | None:
    """The round of a confirmation run (0-based), None for a search trial."""
    if not (plan.run_name and plan.run_name.startswith("confirm")):
        return None
    return int(plan.run_name.split("-")[1][1:]) - 1


def world(
    true_ttft: dict,
    search_ttft: dict | None = None,
    fail: tuple[int | None, int] | None = None,
    search_throughput: dict | None = None,
):
    """The script. `fail`: (max_num_seqs, round) of a confirmation run whose server dies."""
    search_ttft = search_ttft or {}
    search_throughput = {**SEARCH_THROUGHPUT, **(search_throughput or {})}

    def script(plan) -> TrialOutcome:
        seqs, round_ = plan.config.get("max_num_seqs"), confirmation_round(plan)
        if round_ is not None:
            if fail == (seqs, round_):
                return TrialOutcome(
                    status=TrialStatus.FAILED,
                    command="scripted",
                    failure=Failure(FailureClass.OOM, "scripted: killed by the OOM killer"),
                )
            drift = 1 + ROUND_DRIFT[round_]
            ttft, tput = true_ttft[seqs] * drift, 100.0 * drift
        else:
            ttft, tput = search_ttft.get(seqs, true_ttft[seqs]), search_throughput[seqs]
        return TrialOutcome(
            status=TrialStatus.OK,
            command=f"scripted {plan.server_args.flags}",
            metrics={
                "ttft_p95_ms": ttft,
                "output_throughput": tput,
                "request_throughput": tput / 16.0,  # 16 output tokens a request (loop_confirm.yaml)
                "error_rate": 0.0,
                "completed": 8.0,
                "failed": 0.0,
                CLIENT_BEHIND: 0.0,
            },
        )

    return script


def enqueued(r):
    """The runner with trials 0-2 enqueued (a fresh study only: a resumed one has them)."""
    if not r.study.trials:
        for n in ORDER:
            r.study.enqueue_trial({"max_num_seqs": n})
    return r
