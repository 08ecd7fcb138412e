"""`autotune`: the command line. Each subcommand imports what it needs, nothing more."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _cmd_model_build(args: argparse.Namespace) -> int:
    from search import local_model

    path = local_model.build(force=args.force)
    if not args.quiet:
        print(path)
    return 0


def _cmd_params(args: argparse.Namespace) -> int:
    """Which tunable parameters the installed vLLM takes, and what happens to the others."""
    from rich.console import Console
    from rich.table import Table

    from search import registry
    from search.context import launch_context

    ctx = launch_context(model=args.model)
    table = Table(title=f"Tunable parameters on {ctx.installed.label()} ({ctx.hardware.describe()})")
    for col in ("parameter", "flag", "type", "installed vLLM"):
        table.add_column(col)
    for spec in registry.PARAMS:
        reason = registry.unsupported_reason(spec, ctx)
        flag = spec.flag or ("--gpu-memory-utilization" if ctx.hardware.is_gpu else "--kv-cache-memory-bytes")
        table.add_row(spec.name, flag, spec.kind, "accepted" if reason is None else reason)
    Console().print(table)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autotune", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    model = sub.add_parser("model", help="the built-in default model")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    build = model_sub.add_parser("build", help="build (or reuse) the default local model; prints its path")
    build.add_argument("--force", action="store_true")
    build.add_argument("--quiet", action="store_true")
    build.set_defaults(func=_cmd_model_build)

    params = sub.add_parser("params", help="what the installed vLLM accepts of the tunable parameters")
    params.add_argument("--model", type=Path, default=None)
    params.set_defaults(func=_cmd_params)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
