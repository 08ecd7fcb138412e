"""`autotune params`: what a scenario may set on the installed vLLM (the tunable parameters and the
allowed pass-through flags)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.cli.terminal import make_console

if TYPE_CHECKING:
    from app.cli.arg_types import Subcommands


@dataclass(frozen=True)
class ParamsOptions:
    """`autotune params`: the model the installed vLLM is asked about (None: the built-in one)."""

    model: str | None = None


def params_options(args: argparse.Namespace) -> ParamsOptions:
    return ParamsOptions(args.model)


def _cmd_params(args: argparse.Namespace) -> int:
    """What a scenario may set: the tunable parameters (which the installed vLLM takes, and what
    happens to the others) and the allow list of pass-through flags."""
    from rich.table import Table

    from serving import PARAMS, PASS_THROUGH, launch_context, unsupported_reason

    opts = params_options(args)
    ctx = launch_context(model=opts.model)
    on = f"{ctx.installed.label()} ({ctx.hardware.describe()})"
    table = Table(title=f"Tunable parameters on {on}: search_space, server.fixed, baselines")
    for col in ("parameter", "flag", "type", "what it does", "installed vLLM"):
        table.add_column(col)
    for spec in PARAMS:
        reason = unsupported_reason(spec, ctx)
        flag = spec.flag or ("--gpu-memory-utilization" if ctx.hardware.is_gpu else "--kv-cache-memory-bytes")
        table.add_row(spec.name, flag, spec.kind, spec.doc, "accepted" if reason is None else reason)
    flags = Table(
        title=f"Pass-through flags on {on}: server.fixed, baselines",
        caption="A scenario that sets any other flag is refused when it is read.",
    )
    for col in ("key", "flag", "what it does", "installed vLLM"):
        flags.add_column(col)
    for name, why in PASS_THROUGH.items():
        flag = "--" + name.replace("_", "-")
        flags.add_row(
            name, flag, why, "accepted" if ctx.installed.accepts(flag) else "not a flag: refused before start"
        )
    console = make_console()
    console.print(table)
    console.print(flags)
    return 0


def register(sub: Subcommands) -> None:
    params = sub.add_parser(
        "params",
        help="what a scenario may set: the tunable parameters and the allowed "
        "pass-through flags, on the installed vLLM",
    )
    params.add_argument("--model", default=None, help="local model directory or Hugging Face id org/name[@revision]")
    params.set_defaults(func=_cmd_params)
