"""`autotune load`: one load run against an already running server, printed as a metrics table.

The workload comes from a scenario (name in configs/ or a path; its `workload:` section), a
workload YAML (`--workload`), or defaults, then flags override parts of it.
"""
# Registered by app.cli; the measuring is loadgen.loadrun. Heavy imports are made inside
# the functions, so `autotune --help` stays fast. The result is printed by app.cli.load_tables.

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.cli.arg_types import http_url, non_negative_int, positive_float, positive_int
from app.cli.load_tables import print_result, table_cell
from search.disk import write_atomic

if TYPE_CHECKING:
    from rich.console import Console

    from app.cli.arg_types import Subcommands
    from loadgen import GoodputSLO, LoadOptions, WorkloadSpec
    from search.scenario import Goodput, Scenario

DEFAULT_WORKLOAD: dict[str, Any] = {
    "endpoint": "completions",
    "prompt_tokens": 256,
    "output_tokens": 64,
    "arrival": {"mode": "closed", "concurrency": 8},
    "num_requests": 100,
    "warmup_requests": 4,
}


class LoadCliError(ValueError):
    pass


@dataclass(frozen=True)
class WorkloadFlags:
    """The workload overrides of `autotune load` (None: not given; the workload's own)."""

    endpoint: str | None = None
    rate: float | None = None
    arrival: str | None = None
    burstiness: float | None = None
    concurrency: int | None = None
    capacity: float | None = None
    num_requests: int | None = None
    duration: float | None = None
    warmup: int | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    seed: int | None = None
    timeout: float | None = None


@dataclass(frozen=True)
class LoadCommandOptions:
    """`autotune load`: the server, the workload's source (a scenario, `--workload`, else the
    defaults) and its overrides, how the run is made (`run`; its goodput SLOs come from the
    scenario and `goodput`'s KEY:MS items once the scenario is read) and what is written."""

    url: str
    run: LoadOptions
    scenario: str | None = None
    workload: Path | None = None
    model: str | None = None  # None: the first the server lists
    flags: WorkloadFlags = WorkloadFlags()
    goodput: tuple[str, ...] = ()
    loop: str = "auto"
    json: Path | None = None
    records: bool = False
    quiet: bool = False


def load_options(args: argparse.Namespace) -> LoadCommandOptions:
    from loadgen import LoadOptions

    flags = WorkloadFlags(
        endpoint=args.endpoint,
        rate=args.rate,
        arrival=args.arrival,
        burstiness=args.burstiness,
        concurrency=args.concurrency,
        capacity=args.capacity,
        num_requests=args.num_requests,
        duration=args.duration,
        warmup=args.warmup,
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
        seed=args.seed,
        timeout=args.timeout,
    )
    run = LoadOptions(client=args.client, tokenizer_path=args.tokenizer, scrape_metrics=not args.no_server_metrics)
    return LoadCommandOptions(
        url=args.url,
        run=run,
        scenario=args.scenario,
        workload=args.workload,
        model=args.model,
        flags=flags,
        goodput=tuple(args.goodput or ()),
        loop=args.loop,
        json=args.json,
        records=args.records,
        quiet=args.quiet,
    )


def register(subparsers: Subcommands) -> None:
    p = subparsers.add_parser(
        "load",
        help="one load run against a running server; prints the metrics table",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "scenario",
        nargs="?",
        default=None,
        help="scenario name (configs/<name>.yaml) or path; its workload section is used",
    )
    p.add_argument("--url", required=True, type=http_url, help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--workload", type=Path, help="a WorkloadSpec YAML file")
    p.add_argument("--model", help="served model name (default: the first from /v1/models)")
    p.add_argument("--tokenizer", type=Path, help="tokenizer directory (default: the model's root)")
    g = p.add_argument_group("workload overrides")
    g.add_argument("--endpoint", choices=("chat", "completions"))
    g.add_argument("--rate", type=positive_float, help="open loop at this many requests/s")
    g.add_argument(
        "--arrival",
        choices=("poisson", "gamma", "constant", "burst"),
        help="open-loop process for --rate (default: the workload's, else poisson)",
    )
    g.add_argument("--burstiness", type=positive_float, help="gamma shape (implies --arrival gamma)")
    g.add_argument("--concurrency", type=positive_int, help="closed loop with this many users")
    g.add_argument(
        "--capacity",
        type=positive_float,
        metavar="RPS",
        help="capacity that a capacity_fraction rate refers to (default: measured with a short closed-loop probe)",
    )
    g.add_argument(
        "--num-requests",
        type=positive_int,
        help="measured requests (drops the duration bound unless --duration is given too)",
    )
    g.add_argument(
        "--duration",
        type=positive_float,
        help="seconds of sending (drops the request-count bound unless --num-requests is given too)",
    )
    g.add_argument("--warmup", type=non_negative_int, help="warmup requests (excluded)")
    g.add_argument("--prompt-tokens", type=positive_int, help="fixed prompt length (single class)")
    g.add_argument("--output-tokens", type=positive_int, help="fixed output length (single class)")
    g.add_argument("--seed", type=int)
    g.add_argument("--timeout", type=positive_float, help="per-request timeout, s")
    m = p.add_argument_group("measurement")
    m.add_argument("--client", choices=("aiohttp", "openai"), default="aiohttp")
    m.add_argument(
        "--loop", choices=("auto", "asyncio", "uvloop"), default="auto", help="event loop (auto: uvloop if installed)"
    )
    m.add_argument(
        "--goodput", nargs="+", metavar="KEY:MS", help="per-request SLOs for goodput: ttft:500 tpot:50 e2el:2000"
    )
    m.add_argument("--no-server-metrics", action="store_true", help="do not scrape /metrics")
    m.add_argument("--json", type=Path, help="write metrics (and, with --records, every request) here")
    m.add_argument("--records", action="store_true", help="include per-request records in --json")
    m.add_argument("--quiet", action="store_true", help="no table (with --json)")
    p.set_defaults(func=_cmd_load)


def read_source(opts: LoadCommandOptions) -> tuple[dict[str, Any], Path | None, Scenario | None]:
    """(workload mapping as written, its directory, the validated scenario or None).

    A scenario, named or by path, positional or as `--workload`, is found and validated by
    `search.scenario` as for a study (ScenarioError otherwise); the mapping is its `workload:`
    section as written, so the flags below override what the file says.
    """
    import yaml

    from search import scenario as scenario_mod

    if opts.workload is not None:
        if not opts.workload.is_file():
            raise scenario_mod.ScenarioError(f"--workload {opts.workload}: no such file")
        data = scenario_mod.read_mapping(opts.workload.read_text(), f"--workload {opts.workload}")
        if "workload" not in data:  # a plain WorkloadSpec file
            return data, opts.workload.parent.resolve(), None
        path = opts.workload
    elif opts.scenario:
        path = scenario_mod.resolve_path(opts.scenario)
    else:
        return json.loads(json.dumps(DEFAULT_WORKLOAD)), None, None
    sc, text, _ = scenario_mod.load(path)
    return yaml.safe_load(text)["workload"], path.parent.resolve(), sc


def build_workload(opts: LoadCommandOptions) -> tuple[WorkloadSpec, Scenario | None]:
    """(WorkloadSpec with the flags applied, the scenario it came from or None)."""
    from loadgen import WorkloadSpec

    data, base_dir, sc = read_source(opts)
    flags = opts.flags
    data = dict(data)
    if sc is not None and sc.capacity is not None and "num_requests" not in data:
        # One run of a staged scenario's workload is its target stage: the requests every stage
        # holds, its duration_s the cap.
        # size() reads only the SLOs' metrics and percentiles, so relative bounds size alike.
        data["num_requests"] = sc.capacity.size(sc.workload, sc.slos).requests
    if flags.endpoint:
        data["endpoint"] = flags.endpoint
    if flags.prompt_tokens or flags.output_tokens:
        classes = data.pop("classes", None)
        single = dict(classes[0]) if classes else {}
        single.update(
            {k: data.pop(k) for k in ("prompt_tokens", "output_tokens", "shared_prefix", "sharegpt") if k in data}
        )
        single.pop("name", None), single.pop("weight", None)
        if flags.prompt_tokens:
            single.pop("sharegpt", None)
            single["prompt_tokens"] = flags.prompt_tokens
        if flags.output_tokens:
            single["output_tokens"] = flags.output_tokens
        if classes and len(classes) > 1:
            raise LoadCliError(
                f"--prompt-tokens/--output-tokens replace a single class; this workload has {len(classes)}"
            )
        data.update(single)
    arrival = dict(data.get("arrival") or {})
    if flags.concurrency is not None:
        arrival = {"mode": "closed", "concurrency": flags.concurrency}
    elif flags.rate is not None or flags.arrival or flags.burstiness is not None:
        mode = (
            flags.arrival
            or ("gamma" if flags.burstiness is not None else None)
            or (arrival.get("mode") if arrival.get("mode") not in (None, "closed") else "poisson")
        )
        keep = {
            k: v
            for k, v in arrival.items()
            if k in ("burstiness", "peak_multiplier", "period_s", "duty") and (k == "burstiness") == (mode == "gamma")
        }
        rate = flags.rate if flags.rate is not None else arrival.get("rate")
        arrival = {"mode": mode, **keep, "rate": rate}
        if flags.burstiness is not None:
            arrival["burstiness"] = flags.burstiness
    data["arrival"] = arrival
    if flags.num_requests is not None:
        data["num_requests"] = flags.num_requests
        if flags.duration is None:
            data.pop("duration_s", None)
    if flags.duration is not None:
        data["duration_s"] = flags.duration
        if flags.num_requests is None:
            data.pop("num_requests", None)
    for value, key in ((flags.warmup, "warmup_requests"), (flags.seed, "seed"), (flags.timeout, "request_timeout_s")):
        if value is not None:
            data[key] = value
    spec = WorkloadSpec.model_validate(data, context={"base_dir": base_dir} if base_dir else None)
    if not spec.arrival.is_resolved and flags.capacity is not None:
        spec = spec.model_copy(update={"arrival": spec.arrival.resolve(flags.capacity)})
    return spec, sc


def probe_capacity(opts: LoadCommandOptions, spec: WorkloadSpec, sc: Scenario | None, console: Console) -> float:
    """Requests/s of the workload's mix in the saturating closed loop a study calibrates with
    (the scenario's `calibration:` settings, else their defaults)."""
    from loadgen import run_load_sync
    from search.calibration import saturation_workload

    probe = saturation_workload(spec, sc.calibration if sc is not None else None)
    console.print(
        f"capacity_fraction={spec.arrival.capacity_fraction}: measuring capacity first "
        f"(closed loop, {probe.arrival.concurrency} users, {probe.num_requests} requests; "
        "--capacity RPS or --rate skips this)"
    )
    options = replace(opts.run, scrape_metrics=False)
    result = run_load_sync(opts.url, opts.model, probe, options=options, loop=opts.loop)
    capacity = result.metrics.request_throughput
    if not capacity > 0:
        raise LoadCliError("the capacity probe completed no request; give --rate or --concurrency")
    console.print(f"capacity: {table_cell(capacity)} req/s")
    return capacity


def parse_goodput(items: Sequence[str], scenario_goodput: Goodput | None = None) -> GoodputSLO | None:
    """The scenario's absolute goodput bounds (relative ones need a calibration: left out),
    overridden by `--goodput KEY:MS` items."""
    from loadgen import GoodputSLO

    values: dict[str, float] = {}
    if scenario_goodput is not None:
        values = {k: float(v) for k, v in dict(scenario_goodput).items() if isinstance(v, (int, float))}
    for item in items:
        key, _, ms = item.partition(":")
        if key not in ("ttft", "tpot", "e2el") or not ms:
            raise LoadCliError(f"--goodput {item!r}: use ttft:<ms>, tpot:<ms>, e2el:<ms>")
        try:
            values[f"{key}_ms"] = positive_float(ms)
        except argparse.ArgumentTypeError as e:
            raise LoadCliError(f"--goodput {item!r}: {key} {e}") from None
    return GoodputSLO(**values) if values else None


def _cmd_load(args: argparse.Namespace) -> int:
    from rich.console import Console

    from loadgen import LoadRunError, TokenizerError, json_safe, run_load_sync
    from search.scenario import ScenarioError

    opts = load_options(args)
    console = Console()

    def said(e: Exception, code: int) -> int:
        print(f"autotune: error: {e}", file=sys.stderr)  # one line, as app.cli says bad input
        return code

    server_faults = (LoadRunError, TokenizerError)  # the server at --url: unreachable, or not what the run needs
    try:
        spec, sc = build_workload(opts)
        goodput = parse_goodput(opts.goodput, sc.goodput if sc is not None else None)
        if not spec.arrival.is_resolved:
            capacity = probe_capacity(opts, spec, sc, console)
            spec = spec.model_copy(update={"arrival": spec.arrival.resolve(capacity)})
    except ScenarioError:
        raise  # reported by app.cli as for every command: one line, exit code 2
    except (LoadCliError, ValueError) as e:
        return said(e, 2)
    except server_faults as e:
        return said(e, 1)
    try:
        result = run_load_sync(opts.url, opts.model, spec, options=replace(opts.run, goodput=goodput), loop=opts.loop)
    except server_faults as e:
        return said(e, 1)
    if not opts.quiet:
        print_result(result, console)
    if opts.json:
        write_atomic(opts.json, json.dumps(json_safe(result.to_json(include_records=opts.records)), indent=1))
    return 0
