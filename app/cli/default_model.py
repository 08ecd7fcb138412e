"""`autotune model`: the built-in default model (build it) and dummy-weight architectures for GPUs."""

from __future__ import annotations

import argparse
from pathlib import Path


def _cmd_model_build(args: argparse.Namespace) -> int:
    from serving import build_default_model

    path = build_default_model(force=args.force)
    if not args.quiet:
        print(path)
    return 0


def _cmd_model_dummy(args: argparse.Namespace) -> int:
    from serving import build_dummy_architecture

    print(build_dummy_architecture(Path(args.config), Path(args.out)))
    return 0


def register(sub) -> None:
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
