"""How `autotune load` prints one load run: the run's header line, the latency, throughput and
outcome tables, the server's /metrics over the run, per class and per session turn where the
workload has them, and the errors.

Its own room beside the command (`app.cli.load`), which builds the workload and runs it: this
reads a finished `loadgen.LoadResult` and writes only to the terminal. rich is imported inside
the functions, so `autotune --help` stays fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.outputs import fmt_value

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from loadgen import LoadResult, SessionReport


def table_cell(v: Any) -> str:
    return fmt_value(v, digits=4, missing="-")


def _load_line(result: LoadResult) -> str:
    """The run's header: the server, the endpoint, the arrival process and the client."""
    spec = result.spec
    a = spec.arrival
    load = (
        f"closed loop, {a.concurrency} users"
        if a.mode == "closed"
        else f"{a.mode} at {table_cell(a.rate)} req/s"
        + (f" ({table_cell(spec.session_arrival().rate)} sessions/s)" if spec.sessions is not None else "")
        + (f" (burstiness {table_cell(a.burstiness)})" if a.mode == "gamma" else "")
    )
    return f"[bold]{result.base_url}[/] model {result.model}: {spec.endpoint}, {load}, client {result.client}"


def _latency_table(f: dict[str, Any]) -> Table:
    from rich.table import Table

    lat = Table(title="Latency (ms)")
    lat.add_column("metric")
    for s in ("mean", "median", "p90", "p95", "p99"):
        lat.add_column(s, justify="right")
    for name, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL (per chunk)"), ("e2el", "E2EL")):
        lat.add_row(label, *[table_cell(f[f"{name}_{s}_ms"]) for s in ("mean", "median", "p90", "p95", "p99")])
    return lat


def _outcome_table(result: LoadResult, f: dict[str, Any]) -> Table:
    from rich.table import Table

    from loadgen import CLIENT_BEHIND

    run = Table(title="Throughput and outcome")
    run.add_column("metric")
    run.add_column("value", justify="right")
    rows = [
        ("requests completed / failed", f"{int(f['completed'])} / {int(f['failed'])}"),
        ("error rate", table_cell(f["error_rate"])),
        ("duration (s, drain included)", table_cell(f["duration_s"])),
        ("request throughput (req/s)", table_cell(f["request_throughput"])),
        ("output throughput (tok/s)", table_cell(f["output_throughput"])),
        ("total token throughput (tok/s)", table_cell(f["total_token_throughput"])),
        ("goodput (req/s)", table_cell(f["goodput"])),
        ("goodput ratio", table_cell(f["goodput_ratio"])),
        (
            "target rate / achieved send rate (req/s)",
            f"{table_cell(result.target_rate or None)} / {table_cell(result.achieved_send_rate)}",
        ),
        (
            "schedule lag p50 / p99 / max (ms)",
            f"{table_cell(f['schedule_lag_p50_ms'])} / {table_cell(f['schedule_lag_p99_ms'])} / {table_cell(f['schedule_lag_max_ms'])}",
        ),
        ("client CPU (cores, of the run)", table_cell(result.client_cpu_share)),
        ("client behind", "[red]YES[/]" if f[CLIENT_BEHIND] else "no"),
    ]
    for k, v in rows:
        run.add_row(k, v)
    return run


def _server_table(flat: Mapping[str, Any]) -> Table:
    from rich.table import Table

    srv = Table(title="Server (/metrics, over the run)")
    srv.add_column("metric")
    srv.add_column("value", justify="right")
    for k, v in flat.items():
        srv.add_row(k, table_cell(v))
    return srv


def _per_class_table(result: LoadResult, f: dict[str, Any]) -> Table:
    from rich.table import Table

    from loadgen import class_key

    cls = Table(title="Per class")
    cls.add_column("metric")
    names = list(result.metrics.per_class)
    for name in names:
        cls.add_column(name, justify="right")
    for c in (
        "completed",
        "failed",
        "ttft_median_ms",
        "ttft_p99_ms",
        "tpot_median_ms",
        "tpot_p99_ms",
        "e2el_p99_ms",
        "output_throughput",
        "goodput",
    ):
        cls.add_row(c, *[table_cell(f[class_key(c, name)]) for name in names])
    return cls


def _print_errors(result: LoadResult, console: Console) -> None:
    """The error kinds counted, and the first failed request's text as it came."""
    console.print("errors: " + ", ".join(f"{k} x{v}" for k, v in result.metrics.error_kinds.items()))
    first = next((r for r in result.records if r.error_kind), None)
    if first is not None:
        console.print(f"  first: {first.error_text}", markup=False)


def print_result(result: LoadResult, console: Console | None = None) -> None:
    from rich.console import Console

    console = console or Console()
    f = result.flat()
    console.print(_load_line(result))
    console.print(_latency_table(f))
    console.print(_outcome_table(result, f))
    if result.server is not None:
        console.print(_server_table(result.server.flat()))
    if len(result.metrics.per_class) > 1:
        console.print(_per_class_table(result, f))
    if result.sessions is not None:
        print_sessions(result, result.sessions, console)
    if result.metrics.error_kinds:
        _print_errors(result, console)
    for note in result.notes:
        console.print(f"[yellow]note[/]: {note}")


def print_sessions(result: LoadResult, report: SessionReport, console: Console) -> None:
    """A session workload's turns (`report`, of `result`): how each turn index fared, and the
    prefix reuse against the server's prefix-cache hit rate."""
    from rich.table import Table

    per_s = report.sessions / result.duration_s if result.duration_s > 0 else float("nan")
    turns = Table(
        title=f"By turn ({report.completed} of {report.sessions} sessions complete, {table_cell(per_s)} sessions/s)"
    )
    for column in ("turn", "sent", "failed", "TTFT p50 ms", "TTFT p95 ms", "TPOT p50 ms", "prompt tokens"):
        turns.add_column(column, justify="right")
    for t in report.turns:
        turns.add_row(
            str(t.turn), str(t.sent), str(t.failed), table_cell(t.ttft_p50_ms), table_cell(t.ttft_p95_ms),
            table_cell(t.tpot_p50_ms), table_cell(t.prompt_tokens_mean),
        )  # fmt: skip
    console.print(turns)
    hit = result.server.prefix_cache_hit_rate if result.server is not None else float("nan")
    block = f"{report.block_size}-token blocks" if report.block_size else "the server's blocks unknown"
    console.print(
        f"prefix reuse the sessions imply: {table_cell(report.reuse_share)} of prompt tokens ({block}); "
        f"the server's prefix-cache hit rate: {table_cell(hit)}"
    )
