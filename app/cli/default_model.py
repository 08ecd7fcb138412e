"""`autotune model`: the built-in default model (build it) and dummy-weight architectures for GPUs."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.cli.arg_types import Subcommands


@dataclass(frozen=True)
class ModelBuildOptions:
    """`autotune model build`: build again even if built (`force`); print nothing (`quiet`)."""

    force: bool = False
    quiet: bool = False


@dataclass(frozen=True)
class DummyModelOptions:
    """`autotune model dummy`: an architecture's config.json, and the directory written."""

    config: Path
    out: Path


def model_build_options(args: argparse.Namespace) -> ModelBuildOptions:
    return ModelBuildOptions(args.force, args.quiet)


def dummy_model_options(args: argparse.Namespace) -> DummyModelOptions:
    return DummyModelOptions(Path(args.config), Path(args.out))


def _cmd_model_build(args: argparse.Namespace) -> int:
    from serving import build_default_model

    opts = model_build_options(args)
    path = build_default_model(force=opts.force)
    if not opts.quiet:
        print(path)
    return 0


def _cmd_model_dummy(args: argparse.Namespace) -> int:
    from serving import build_dummy_architecture

    opts = dummy_model_options(args)
    print(build_dummy_architecture(opts.config, opts.out))
    return 0


def register(sub: Subcommands) -> None:
    model = sub.add_parser("model", help="the built-in default model")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    build = model_sub.add_parser("build", help="build (or reuse) the default local model; prints its path")
    build.add_argument("--force", action="store_true")
    build.add_argument("--quiet", action="store_true")
    build.set_defaults(func=_cmd_model_build)
    dummy = model_sub.add_parser(
        "dummy",
        help="a real architecture's config.json + the local tokenizer, no weights "
        "(served with --load-format dummy; for GPUs)",
    )
    dummy.add_argument("--config", required=True, help="path to the architecture's config.json")
    dummy.add_argument("--out", required=True, help="directory to write (then: MODEL=that directory)")
    dummy.set_defaults(func=_cmd_model_dummy)
