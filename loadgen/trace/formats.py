"""Request traces read from a file: when each request arrived, its lengths, what prefix it shares.

Four formats (docs/traces.md), told apart by their columns when `format` is `auto`:

| format     | file  | columns                                                                        |
|------------|-------|--------------------------------------------------------------------------------|
| `jsonl`    | JSONL | `timestamp` (s, or ISO 8601), `prompt_tokens`, `output_tokens`; optional       |
|            |       | `class`, `prefix_id` + `prefix_tokens`, `hash_ids` (blocks of `block_tokens`), |
|            |       | `session_id` + `turn` (read by `sessions`; a replay sends rows as they come)  |
| `azure`    | CSV   | `TIMESTAMP` (date and time), `ContextTokens`, `GeneratedTokens`                |
| `burstgpt` | CSV   | `Timestamp` (s), `Request tokens`, `Response tokens` (`Model`, `Log Type`, ...) |
| `mooncake` | JSONL | `timestamp` (ms), `input_length`, `output_length`; optional `hash_ids`         |

A prompt's shared part is a chain of segments, each a (key, tokens) pair: a `prefix_id` is one
segment of `prefix_tokens`, `hash_ids` one segment of `block_tokens` per id (Mooncake's blocks
are 512 tokens). Two requests share their prompt's first tokens as far as their segment chains
agree, which is how a server's prefix cache sees them.

Rows with a zero length are dropped and counted (BurstGPT logs a failed request with 0 response
tokens); anything else that is not a trace is a `TraceError`: one line naming the file, the row
and what was expected.
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

FORMATS = ("jsonl", "azure", "burstgpt", "mooncake")
MOONCAKE_BLOCK_TOKENS = 512
DEFAULT_CLASS = "default"

# The columns each format needs (as the file spells them) and the ones it may have.
REQUIRED: dict[str, tuple[str, ...]] = {
    "jsonl": ("timestamp", "prompt_tokens", "output_tokens"),
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
    "mooncake": ("timestamp", "input_length", "output_length"),
}
OPTIONAL: dict[str, tuple[str, ...]] = {
    "jsonl": ("class", "prefix_id", "prefix_tokens", "hash_ids", "session_id", "turn"),
    "azure": (),
    "burstgpt": ("Model", "Total tokens", "Log Type"),
    "mooncake": ("hash_ids",),
}
_CSV_FORMATS = ("azure", "burstgpt")

Segments = tuple[tuple[int, int], ...]  # (segment key, tokens), in prompt order


class TraceError(ValueError):
    """A file that cannot be replayed; the message is one line."""


@dataclass(frozen=True, eq=False)
class Trace:
    """Requests in arrival order. `arrival_s` counts from the first request (which is 0)."""

    source: str
    format: str
    arrival_s: np.ndarray  # float64, non-decreasing
    prompt_tokens: np.ndarray  # int64 >= 1
    output_tokens: np.ndarray  # int64 >= 1
    class_names: tuple[str, ...]  # distinct, in order of first appearance
    class_index: np.ndarray  # int64, into class_names
    segments: tuple[Segments, ...] | None = None  # None: the file says nothing of shared prefixes
    notes: tuple[str, ...] = field(default=())

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def span_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) else 0.0

    def take(self, rows: np.ndarray) -> Trace:
        """The rows given (ascending), their clock restarted at the first."""
        rows = np.asarray(rows, dtype=np.int64)
        t = self.arrival_s[rows]
        used = np.unique(self.class_index[rows])
        names = tuple(self.class_names[i] for i in used)
        remap = np.full(len(self.class_names), -1, dtype=np.int64)
        remap[used] = np.arange(len(used))
        segs = tuple(self.segments[i] for i in rows) if self.segments is not None else None
        return Trace(
            self.source,
            self.format,
            t - t[0] if len(t) else t,
            self.prompt_tokens[rows],
            self.output_tokens[rows],
            names,
            remap[self.class_index[rows]],
            segs,
            self.notes,
        )

    def between(self, start_s: float | None, end_s: float | None) -> Trace:
        """The requests that arrived in [start_s, end_s) of the trace's clock; TraceError if none."""
        lo = -np.inf if start_s is None else start_s
        hi = np.inf if end_s is None else end_s
        rows = np.flatnonzero((self.arrival_s >= lo) & (self.arrival_s < hi))
        if not len(rows):
            raise TraceError(
                f"{self.source}: an empty window: no request arrived between "
                f"{_secs(start_s, 0.0)} and {_secs(end_s, self.span_s)} (the trace spans 0-{self.span_s:g} s)"
            )
        return self.take(rows)

    def of_classes(self, names: list[str]) -> Trace:
        """The requests of the classes named (a calibration measures one class at a time)."""
        wanted = [i for i, n in enumerate(self.class_names) if n in names]
        rows = np.flatnonzero(np.isin(self.class_index, wanted))
        if not len(rows):
            raise TraceError(f"{self.source}: no request of class {', '.join(names)}")
        return self.take(rows)


def _secs(value: float | None, default: float) -> str:
    return f"{default if value is None else value:g} s"


# -- reading ----------------------------------------------------------------------------------


def _columns_problem(path: Path, found: list[str]) -> TraceError:
    expected = "; ".join(
        f"{name} ({', '.join(REQUIRED[name])}{' [' + ', '.join(OPTIONAL[name]) + ']' if OPTIONAL[name] else ''})"
        for name in FORMATS
    )
    shown = ", ".join(found) if found else "none"
    return TraceError(
        f"{path}: not a trace in a format this reads: columns found: {shown}; expected one of: {expected}"
    )


def _first_line(path: Path) -> str:
    with path.open(encoding="utf-8-sig", errors="replace") as f:
        for line in f:
            if line.strip():
                return line
    raise TraceError(f"{path}: an empty window: the file holds no request")


def detect_format(path: Path) -> str:
    """The format whose required columns the file's header (CSV) or first object (JSONL) has."""
    line = _first_line(path)
    if line.lstrip().startswith("{"):
        try:
            keys = list(json.loads(line))
        except json.JSONDecodeError as e:
            raise TraceError(f"{path}: line 1 is not a JSON object ({e.msg})") from None
        candidates = ("mooncake", "jsonl")
    else:
        keys = [c.strip() for c in next(csv.reader([line]))]
        candidates = _CSV_FORMATS
    for name in candidates:
        if all(c in keys for c in REQUIRED[name]):
            return name
    raise _columns_problem(path, keys)


def _number(value: Any, path: Path, row: int, column: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise TraceError(f"{path}: row {row}: {column} is not a number: {value!r}") from None
    if not np.isfinite(x):
        raise TraceError(f"{path}: row {row}: {column} is not a finite number: {value!r}")
    return x


def _length(value: Any, path: Path, row: int, column: str) -> int:
    x = _number(value, path, row, column)
    if x < 0 or x != int(x):
        raise TraceError(f"{path}: row {row}: {column} must be a whole number >= 0, got {value!r}")
    return int(x)


def _key(kind: str, value: Any) -> int:
    """A segment's key: the same id gives the same key in every file and process."""
    return int.from_bytes(hashlib.sha256(f"{kind}:{value}".encode()).digest()[:8], "little")


def _timestamp(value: Any, path: Path, row: int, column: str, unit_s: float) -> tuple[float | int, bool]:
    """(time, whether it was a date and time): seconds for a number in the format's unit, or
    nanoseconds since 1970 for an ISO 8601 date and time (kept whole: as seconds since 1970 a
    float64 keeps only about a microsecond)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = None
    if x is not None:
        if not np.isfinite(x):
            raise TraceError(f"{path}: row {row}: {column} is not a finite number: {value!r}")
        return x * unit_s, False
    try:
        return int(np.datetime64(str(value).strip().rstrip("Z"), "ns").astype(np.int64)), True
    except ValueError:
        raise TraceError(f"{path}: row {row}: {column} is neither a number nor a date and time: {value!r}") from None


def _rows(path: Path, fmt: str):
    """(row number, mapping) for each request line of the file."""
    if fmt in _CSV_FORMATS:
        with path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f, skipinitialspace=True)
            found = [c.strip() for c in reader.fieldnames or []]
            if not all(c in found for c in REQUIRED[fmt]):
                raise _columns_problem(path, found)
            reader.fieldnames = found
            for i, record in enumerate(reader, start=2):
                yield i, record
        return
    with path.open(encoding="utf-8") as f:
        for i, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise TraceError(f"{path}: line {i} is not a JSON object ({e.msg})") from None
            if not isinstance(record, dict):
                raise TraceError(f"{path}: line {i} is not a JSON object")
            missing = [c for c in REQUIRED[fmt] if c not in record]
            if missing:
                raise TraceError(
                    f"{path}: line {i} lacks {', '.join(missing)}; columns found: {', '.join(record)}; "
                    f"{fmt} needs {', '.join(REQUIRED[fmt])}"
                )
            yield i, record


def _segments(record: dict, fmt: str, path: Path, row: int, block_tokens: int) -> Segments:
    out: list[tuple[int, int]] = []
    if fmt == "jsonl" and record.get("prefix_id") is not None:
        if "prefix_tokens" not in record:
            raise TraceError(f"{path}: row {row}: prefix_id needs prefix_tokens (how many tokens the prefix has)")
        tokens = _length(record["prefix_tokens"], path, row, "prefix_tokens")
        if tokens:
            out.append((_key("prefix", record["prefix_id"]), tokens))
    ids = record.get("hash_ids")
    if ids:
        if not isinstance(ids, list):
            raise TraceError(f"{path}: row {row}: hash_ids must be a list of block ids, got {ids!r}")
        out += [(_key("block", h), block_tokens) for h in ids]
    return tuple(out)


def _times(raw: list, rows: list[int], path: Path, column: str, unit_s: float) -> tuple[np.ndarray, bool]:
    """(times, whether dates): seconds, or nanoseconds since 1970 for dates; converted a column at
    a time (a week of gateway logs is millions of rows), row by row only to name a bad one."""
    try:
        t = np.asarray(raw, dtype=float) * unit_s
        if np.isfinite(t).all():
            return t, False
    except (TypeError, ValueError):
        try:
            return np.array([str(v).strip().rstrip("Z") for v in raw], dtype="datetime64[ns]").astype(np.int64), True
        except ValueError:
            pass
    dates = None
    for row, value in zip(rows, raw):  # the first row that is not like the others
        _, is_date = _timestamp(value, path, row, column, unit_s)
        if dates is not None and is_date != dates:
            raise TraceError(f"{path}: row {row}: {column} mixes dates and numbers ({value!r})")
        dates = is_date
    raise TraceError(f"{path}: {column}: timestamps that are neither all numbers nor all dates")


def _lengths(raw: list, rows: list[int], path: Path, column: str) -> np.ndarray:
    try:
        x = np.asarray(raw, dtype=float)
        bad = np.flatnonzero(~np.isfinite(x) | (x < 0) | (x != np.floor(x)))
    except (TypeError, ValueError):
        bad = None
    if bad is None or len(bad):
        for i in range(len(raw)) if bad is None else bad[:1]:
            _length(raw[i], path, rows[i], column)  # raises, naming the row
    return x.astype(np.int64)


def _read(path: Path, fmt: str, block_tokens: int) -> Trace:
    cols = dict(zip(("t", "prompt", "output"), REQUIRED[fmt]))
    rows: list[int] = []
    raw: dict[str, list] = {"t": [], "prompt": [], "output": []}
    classes: list[str] = []
    segments: list[Segments] = []
    for row, record in _rows(path, fmt):
        rows.append(row)
        for key, column in cols.items():
            raw[key].append(record[column])
        if fmt == "jsonl":
            classes.append(str(record.get("class") or DEFAULT_CLASS))
        if fmt in ("jsonl", "mooncake"):
            segments.append(_segments(record, fmt, path, row, block_tokens))
    if not rows:
        raise TraceError(f"{path}: an empty window: the file holds no request")
    t, dates = _times(raw["t"], rows, path, cols["t"], 1e-3 if fmt == "mooncake" else 1.0)
    if not dates and (t < 0).any():
        i = int(np.argmax(t < 0))
        raise TraceError(f"{path}: row {rows[i]}: {cols['t']} is negative ({raw['t'][i]})")
    late = np.flatnonzero(np.diff(t) < 0)
    if len(late):
        i = int(late[0]) + 1
        raise TraceError(
            f"{path}: row {rows[i]}: timestamps out of order ({raw['t'][i]} after row {rows[i - 1]}'s "
            f"{raw['t'][i - 1]}); sort the file by arrival time"
        )
    prompt = _lengths(raw["prompt"], rows, path, cols["prompt"])
    output = _lengths(raw["output"], rows, path, cols["output"])
    keep = (prompt > 0) & (output > 0)
    dropped = int(np.count_nonzero(~keep))
    if not keep.any():
        raise TraceError(
            f"{path}: an empty window: no request with prompt and output lengths >= 1 "
            f"({dropped} rows with a zero length dropped)"
        )
    kept = np.flatnonzero(keep)
    names_of = [classes[i] for i in kept] if classes else [DEFAULT_CLASS] * len(kept)
    bad = sorted({c for c in set(names_of) if not _is_class_name(c)})
    if bad:
        raise TraceError(f"{path}: class {bad[0]!r}: use letters, digits, '_', '.', '-' only")
    names = tuple(dict.fromkeys(names_of))
    index = {n: i for i, n in enumerate(names)}
    segs = tuple(segments[i] for i in kept) if segments and any(segments) else None
    notes = (f"{dropped} rows with a zero prompt or output length dropped",) if dropped else ()
    t = t[kept]
    return Trace(
        str(path),
        fmt,
        (t - t[0]) / (1e9 if dates else 1.0),
        prompt[kept],
        output[kept],
        names,
        np.asarray([index[c] for c in names_of], dtype=np.int64),
        segs,
        notes,
    )


def _is_class_name(name: str) -> bool:
    import re

    return re.fullmatch(r"[A-Za-z0-9_.-]+", name) is not None


@lru_cache(maxsize=8)
def _cached(path: str, fmt: str, block_tokens: int, _mtime_ns: int, _size: int) -> Trace:
    return _read(Path(path), fmt, block_tokens)


def read_trace(path: str | Path, format: str = "auto", block_tokens: int | None = None) -> Trace:
    """The file's requests; TraceError (one line) for anything that is not a trace.

    `block_tokens`: tokens per `hash_ids` entry (default: Mooncake's 512)."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    fmt = detect_format(path) if format == "auto" else format
    if fmt not in FORMATS:
        raise TraceError(f"{path}: unknown trace format {fmt!r}; formats: auto, {', '.join(FORMATS)}")
    stat = path.stat()
    return _cached(str(path.resolve()), fmt, block_tokens or MOONCAKE_BLOCK_TOKENS, stat.st_mtime_ns, stat.st_size)
