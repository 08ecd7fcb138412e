"""argparse types for the command lines' numbers and URLs: a value out of range is refused by
argparse itself, one line naming the flag, exit code 2, before anything runs. And `Subcommands`,
the type of what each command module's `register` is handed."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit

Number = TypeVar("Number", int, float)

if TYPE_CHECKING:
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]


def _number(text: str, kind: Callable[[str], Number]) -> Number | None:
    try:
        value = kind(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def non_negative_int(text: str) -> int:
    value = _number(text, int)
    if value is None or value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    value = _number(text, int)
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def _above_zero(text: str, what: str) -> float:
    value = _number(text, float)
    if value is None or not value > 0:
        raise argparse.ArgumentTypeError(f"must be {what} > 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    return _above_zero(text, "a number")


def minutes(text: str) -> float:
    return _above_zero(text, "a number of minutes")


def port_number(text: str) -> int:
    value = _number(text, int)
    if value is None or not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port, 1-65535, got {text!r}")
    return value


def http_url(text: str) -> str:
    """A server's base URL: http(s)://HOST[:PORT], without a trailing slash."""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"must be http://HOST:PORT (or https://), got {text!r}")
    return text.rstrip("/")
