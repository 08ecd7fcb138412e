"""Sessions in a trace: which requests are the turns of one conversation, and what the
conversations look like (docs/traces.md, "Sessions in a trace").

Two kinds of file carry sessions:

- our JSONL with a `session_id` (a string or an integer; 7 and "7" name one session) and,
  optionally, `turn` (1-based; without it a session's rows are its turns in file order). Once
  any row names a session, a row without one is a session of one turn of its own;
- ShareGPT-style conversations (a JSON list, or JSONL, of objects whose `conversations`,
  `conversation` or `messages` is a list of messages with `from`/`role` and `value`/`content`):
  each conversation is a session, each user message answered by the assistant a turn. These
  hold text, not token counts, and no tokenizer is at hand when a trace is read, so lengths
  are approximate: whitespace-separated words x 1.3.

What is derived, turn by turn (`jsonl_sessions`, `sharegpt_sessions`):

- new user tokens: in JSONL, a turn whose prompt grew from the previous turn's (its
  prompt_tokens above the previous turn's prompt_tokens + output_tokens) sent that difference
  as new; any other turn (a session's first, or one after a client cut the history) is a fresh
  prompt: all its prompt_tokens are new, less the system prompt (`prefix_tokens` of a row that
  names a `prefix_id`). The difference also holds the chat template's few tokens around the
  two messages. In ShareGPT: the user message's own tokens;
- repeated tokens: what of a turn's prompt an earlier turn of its session sent or received (the
  previous prompt and answer when the prompt grew; the system prompt and every earlier message
  in ShareGPT), and their share of all prompt tokens: what a prefix cache can reuse within sessions;
- think time: the gap between a turn's timestamp and the previous turn's. A trace logs when a
  request arrived, not when its answer ended, so the gap is an upper bound on the user's pause:
  it holds the previous answer's latency too. ShareGPT files have no times.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.trace.formats import TraceError, _length, _lengths, _rows, _times, detect_format, read_trace
from loadgen.trace.stats import length_quantiles

SESSION_COLUMNS = ("session_id", "turn")
SHAREGPT_KEYS = ("conversations", "conversation", "messages")
WORDS_TO_TOKENS = 1.3
_USER_ROLES = ("human", "user")
_ASSISTANT_ROLES = ("gpt", "assistant", "chatgpt", "model")
APPROXIMATE_NOTE = "ShareGPT lengths are approximate: whitespace words x 1.3 (from-trace has no tokenizer)"


@dataclasses.dataclass(frozen=True)
class SessionRow:
    """One request of a JSONL trace, with what places it in a session."""

    row: int  # the file's line, for messages
    session: str
    turn: int | None  # None: the next in file order
    time_s: float
    prompt_tokens: int
    output_tokens: int
    system_tokens: int = 0  # prefix_tokens of a row naming a prefix_id: the system prompt


@dataclasses.dataclass(frozen=True, eq=False)
class TraceSessions:
    """The conversations of a trace: per session, per turn (in session order) and per gap."""

    source: str
    format: str  # "jsonl" or "sharegpt"
    turns: np.ndarray  # per session: its turns
    system_tokens: np.ndarray  # per session: its system prompt (0: none known)
    user_tokens: np.ndarray  # per turn: new user tokens
    output_tokens: np.ndarray  # per turn
    prompt_tokens: np.ndarray  # per turn: the whole prompt
    repeated_tokens: np.ndarray  # per turn: prompt tokens an earlier turn of its session sent or received
    think_s: np.ndarray  # per gap between consecutive turns of a session (an upper bound); empty: no times
    span_s: float = 0.0
    notes: tuple[str, ...] = dataclasses.field(default=())

    @property
    def sessions(self) -> int:
        return len(self.turns)

    @property
    def multi_turn(self) -> bool:
        """Whether any session has a second turn: one-turn sessions are independent requests."""
        return bool(len(self.turns)) and int(self.turns.max()) > 1

    @property
    def repeated_share(self) -> float:
        total = int(self.prompt_tokens.sum())
        return float(self.repeated_tokens.sum() / total) if total else float("nan")

    def user_quantiles(self) -> dict[str, float]:
        return length_quantiles(self.user_tokens)

    def output_quantiles(self) -> dict[str, float]:
        return length_quantiles(self.output_tokens)


# -- JSONL --------------------------------------------------------------------------------------


def jsonl_sessions(rows: Sequence[SessionRow], source: str) -> TraceSessions:
    """The sessions of a JSONL trace's rows (in file order); TraceError, naming the row, for a
    session whose turns go backwards or repeat."""
    by_session: dict[str, list[SessionRow]] = {}
    for r in rows:
        by_session.setdefault(r.session, []).append(r)
    turns, system, user, output, prompt, repeated, think = [], [], [], [], [], [], []
    for sid, own in by_session.items():
        last: SessionRow | None = None
        last_turn = 0
        for r in own:
            turn = r.turn if r.turn is not None else last_turn + 1
            if last is not None and turn <= last_turn:
                what = f"repeats its turn {turn}" if turn == last_turn else f"comes after its turn {last_turn}"
                raise TraceError(
                    f"{source}: row {r.row}: turn {turn} of session {sid!r} {what} (row {last.row}): "
                    "a session's turns go up in file order, each once"
                )
            before = last.prompt_tokens + last.output_tokens if last is not None else None
            if before is not None and r.prompt_tokens > before:  # the conversation so far, then the new message
                user.append(r.prompt_tokens - before)
                repeated.append(before)
            else:  # a fresh prompt: the system prompt and the user's message
                user.append(max(1, r.prompt_tokens - r.system_tokens))
                repeated.append(0)
            if last is not None:
                think.append(r.time_s - last.time_s)
            output.append(r.output_tokens)
            prompt.append(r.prompt_tokens)
            last, last_turn = r, turn
        turns.append(len(own))
        system.append(own[0].system_tokens)
    times = [r.time_s for r in rows]
    return TraceSessions(
        source,
        "jsonl",
        np.asarray(turns, dtype=np.int64),
        np.asarray(system, dtype=np.int64),
        np.asarray(user, dtype=np.int64),
        np.asarray(output, dtype=np.int64),
        np.asarray(prompt, dtype=np.int64),
        np.asarray(repeated, dtype=np.int64),
        np.asarray(think, dtype=float),
        float(max(times) - min(times)) if times else 0.0,
    )


def _session_id(value: Any, path: Path, row: int) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TraceError(f"{path}: row {row}: session_id must be a string or an integer, got {value!r}")
    return str(value)


def _turn(value: Any, path: Path, row: int) -> int:
    whole = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value == int(value))
    if isinstance(value, bool) or not whole or value < 1:
        raise TraceError(f"{path}: row {row}: turn must be a whole number >= 1 (a session's first is 1), got {value!r}")
    return int(value)


def jsonl_session_rows(path: Path) -> list[SessionRow] | None:
    """The rows of our JSONL trace placed in sessions, or None if no row names a session (a
    `turn` without one is an error). Rows with a zero length are dropped, as `read_trace` drops them."""
    lines: list[int] = []
    records: list[dict] = []
    named = False
    for line, record in _rows(path, "jsonl"):
        sid, turn = record.get("session_id"), record.get("turn")
        if turn is not None and sid is None:
            raise TraceError(
                f"{path}: row {line}: turn without session_id: a turn numbers the requests of a session, "
                "so name the session too"
            )
        named = named or sid is not None
        lines.append(line)
        records.append(record)
    if not named:
        return None
    t, dates = _times([r["timestamp"] for r in records], lines, path, "timestamp", 1.0)
    t = (t - t[0]) / (1e9 if dates else 1.0)
    prompt = _lengths([r["prompt_tokens"] for r in records], lines, path, "prompt_tokens")
    output = _lengths([r["output_tokens"] for r in records], lines, path, "output_tokens")
    out = []
    for i, (line, record) in enumerate(zip(lines, records)):
        if prompt[i] <= 0 or output[i] <= 0:
            continue
        sid = record.get("session_id")
        turn = record.get("turn")
        system = 0
        if record.get("prefix_id") is not None and "prefix_tokens" in record:
            system = _length(record["prefix_tokens"], path, line, "prefix_tokens")
        out.append(
            SessionRow(
                line,
                _session_id(sid, path, line) if sid is not None else f"\0row {line}",  # a session of its own
                _turn(turn, path, line) if turn is not None else None,
                float(t[i]),
                int(prompt[i]),
                int(output[i]),
                system,
            )
        )
    return out


# -- ShareGPT -----------------------------------------------------------------------------------


def approximate_tokens(text: str) -> int:
    """Whitespace-separated words x 1.3: about what a BPE tokenizer makes of English prose."""
    return math.ceil(len(text.split()) * WORDS_TO_TOKENS)


def _messages(entry: Any) -> list[dict] | None:
    if not isinstance(entry, dict):
        return None
    turns = next((entry[k] for k in SHAREGPT_KEYS if isinstance(entry.get(k), list)), None)
    return [m for m in turns if isinstance(m, dict)] if turns is not None else None


def _role(m: dict) -> str:
    return str(m.get("from") or m.get("role") or "").lower()


def _text(m: dict) -> str:
    value = m.get("value") if "value" in m else m.get("content", "")
    return value if isinstance(value, str) else json.dumps(value)


def _conversation(messages: list[dict], count: Callable[[str], int]) -> tuple[int, list[tuple[int, int, int, int]]]:
    """(system tokens, per turn (new user, output, prompt, repeated tokens)) of one conversation."""
    system, history, pending = 0, 0, None
    turns: list[tuple[int, int, int, int]] = []
    for m in messages:
        role, n = _role(m), count(_text(m))
        if role == "system" and not turns and pending is None and not history:
            system += n  # the system prompt: leads every turn's prompt
        elif role in _ASSISTANT_ROLES:
            if pending is None:  # an answer to no question: context for the turns after it
                history += n
                continue
            before = system + history
            turns.append((max(1, pending), max(1, n), before + pending, before if turns else 0))
            history += pending + n
            pending = None
        else:  # the user (or a tool, or a system note mid-conversation): the next turn's new input
            pending = (pending or 0) + n
    return system, turns


def sharegpt_sessions(
    entries: Iterable[Any], source: str, count: Callable[[str], int] = approximate_tokens
) -> TraceSessions:
    """The sessions of ShareGPT-style conversations: each conversation with at least one user
    message answered is a session; `count` gives a text's tokens. TraceError if none is."""
    turns, system, user, output, prompt, repeated = [], [], [], [], [], []
    skipped = 0
    for entry in entries:
        messages = _messages(entry)
        if messages is None:
            skipped += 1
            continue
        sys_tokens, own = _conversation(messages, count)
        if not own:
            skipped += 1
            continue
        turns.append(len(own))
        system.append(sys_tokens)
        for u, o, p, r in own:
            user.append(u)
            output.append(o)
            prompt.append(p)
            repeated.append(r)
    if not turns:
        raise TraceError(
            f"{source}: no conversation with a user message followed by an answer "
            f"(a list of objects with {', '.join(SHAREGPT_KEYS)})"
        )
    notes = [APPROXIMATE_NOTE]
    if skipped:
        notes.append(f"{skipped} of the file's entries hold no user message followed by an answer: skipped")
    return TraceSessions(
        source,
        "sharegpt",
        np.asarray(turns, dtype=np.int64),
        np.asarray(system, dtype=np.int64),
        np.asarray(user, dtype=np.int64),
        np.asarray(output, dtype=np.int64),
        np.asarray(prompt, dtype=np.int64),
        np.asarray(repeated, dtype=np.int64),
        np.zeros(0),
        notes=tuple(notes),
    )


def _sharegpt_entries(path: Path, text: str) -> list[Any] | None:
    """The file's entries if it is ShareGPT-style, else None."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            entries = json.loads(text)
        except json.JSONDecodeError:
            return None  # not JSON: the trace readers say what they expected
        return entries if isinstance(entries, list) and any(_messages(e) is not None for e in entries) else None
    first = stripped.split("\n", 1)[0]
    try:
        head = json.loads(first)
    except json.JSONDecodeError:
        return None
    if _messages(head) is None:
        return None
    entries = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise TraceError(f"{path}: line {i} is not a JSON object ({e.msg})") from None
    return entries


# -- reading ------------------------------------------------------------------------------------


def read_sessions(path: str | Path) -> TraceSessions | None:
    """The sessions of a trace file, or None if it carries none (a trace of independent
    requests, or not a trace: `read_trace` says what it is). TraceError, one line naming the row
    and the field, for session columns that do not make sessions."""
    path = Path(path)
    if not path.is_file():
        return None
    with path.open(encoding="utf-8-sig", errors="replace") as f:
        head = f.read(4096).lstrip()
    if not head.startswith(("[", "{")):  # a CSV trace: no sessions, and no need to read it all
        return None
    text = path.read_text(encoding="utf-8-sig", errors="replace")
    entries = _sharegpt_entries(path, text)
    if entries is not None:
        return sharegpt_sessions(entries, str(path))
    if not any(f'"{c}"' in text for c in SESSION_COLUMNS):
        return None
    try:
        if detect_format(path) != "jsonl":
            return None
    except TraceError:
        return None
    trace = read_trace(path, "jsonl")  # the columns every request has, checked as a replay checks them
    rows = jsonl_session_rows(path)
    if rows is None:
        return None
    return dataclasses.replace(jsonl_sessions(rows, str(path)), notes=trace.notes)
