"""The KV cache vLLM sized at start, read from the server's log, against the memory arithmetic's.

vLLM logs what its profiling left for the KV cache once per engine, in tokens since V1:

    CPU KV cache size: 65,536 tokens, Maximum concurrency for 2,048 tokens per request: 32.00x
    GPU KV cache size: 444,592 tokens            (the concurrency on this line or the next)
    # GPU blocks: 27787, # CPU blocks: 2048      (V0; `# cuda blocks:` in its later releases)

Every started trial stores the predicted tokens, vLLM's and the relative error with its server
diagnostics, so the arithmetic that rejects configurations before a start is checked on every
start that happens.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from serving.checks import memory_budget
from serving.registry import LaunchContext
from serving.vllm_flags import default_block_size

_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
_V0_BLOCKS = re.compile(r"# (?:GPU|cuda) blocks: (\d+)")

PREDICTED = "kv_cache_tokens_predicted"
LOGGED = "kv_cache_tokens_vllm"
ERROR = "kv_cache_tokens_error"  # (predicted - vLLM's) / vLLM's


def logged_kv_tokens(log_text: str, block_size: int) -> int | None:
    """The KV cache tokens vLLM logged (the smallest engine's, where several did), or None."""
    tokens = [int(m.group(1).replace(",", "")) for m in _TOKENS.finditer(log_text)]
    if tokens:
        return min(tokens)
    blocks = [int(m.group(1)) for m in _V0_BLOCKS.finditer(log_text)]
    return min(blocks) * block_size if blocks else None


def kv_cache_check(predicted: int | None, logged: int | None) -> dict[str, float]:
    """The diagnostics a started trial stores: the arithmetic's tokens, vLLM's and the relative
    error, each where known."""
    found: dict[str, float] = {}
    if predicted is not None:
        found[PREDICTED] = predicted
    if logged is not None:
        found[LOGGED] = logged
    if predicted is not None and logged:
        found[ERROR] = (predicted - logged) / logged
    return found


def kv_cache_check_at_start(values: Mapping[str, Any], ctx: LaunchContext, log_path: Path) -> dict[str, float]:
    """`kv_cache_check` for a server that started with `values` (as applied) and logs to `log_path`."""
    budget = memory_budget(dict(values), ctx)
    try:
        text = Path(log_path).read_text(errors="replace")
    except OSError:
        text = ""
    block = values.get("block_size") or default_block_size(ctx.hardware)
    return kv_cache_check(budget.tokens if budget is not None else None, logged_kv_tokens(text, block))


def describe_kv_check(diagnostics: Mapping[str, Any]) -> str:
    """One line for a trial's KV check: '65,536 predicted, 65,536 by vLLM (+0.0%)' ('' if none)."""
    predicted, logged, error = diagnostics.get(PREDICTED), diagnostics.get(LOGGED), diagnostics.get(ERROR)
    parts = [
        f"{predicted:,.0f} predicted" if predicted is not None else "",
        f"{logged:,.0f} by vLLM" if logged is not None else "",
    ]
    text = ", ".join(p for p in parts if p)
    return f"{text} ({error:+.1%})" if error is not None else text
