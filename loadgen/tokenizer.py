"""The served model's tokenizer, as far as building prompts of exact lengths needs it.

`tokenizers` reads `tokenizer.json` in milliseconds; `transformers` is the fallback for models
without one. The chat template is rendered here with Jinja (as transformers does) so chat
prompt lengths can be counted locally; the run checks a sample against the server's
`/tokenize` and realigns every prompt there if the counts disagree.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import numpy as np


class TokenizerError(RuntimeError):
    pass


def _load_chat_template(path: Path) -> str | None:
    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    cfg_file = path / "tokenizer_config.json"
    if cfg_file.is_file():
        tpl = json.loads(cfg_file.read_text()).get("chat_template")
        if isinstance(tpl, list):  # named templates
            named = {t.get("name"): t.get("template") for t in tpl}
            tpl = named.get("default") or next(iter(named.values()), None)
        return tpl
    return None


def _special_token_strings(path: Path) -> dict[str, str | None]:
    out: dict[str, str | None] = {"bos_token": None, "eos_token": None}
    cfg_file = path / "tokenizer_config.json"
    if cfg_file.is_file():
        cfg = json.loads(cfg_file.read_text())
        for key in out:
            value = cfg.get(key)
            out[key] = value.get("content") if isinstance(value, dict) else value
    return out


class PromptTokenizer:
    """encode/decode without special tokens, the ids safe to sample, and chat-prompt counting."""

    def __init__(
        self,
        encode: Callable[[str], list[int]],
        decode: Callable[[list[int]], str],
        vocab_size: int,
        special_ids: set[int],
        chat_template: str | None = None,
        special_strings: dict[str, str | None] | None = None,
        fingerprint: str = "",
    ):
        self._encode = encode
        self._decode = decode
        self.vocab_size = vocab_size
        self.special_ids = frozenset(special_ids)
        self.chat_template = chat_template
        self.special_strings = special_strings or {}
        self.fingerprint = fingerprint

    @classmethod
    def load(cls, path: str | Path) -> PromptTokenizer:
        path = Path(path).expanduser()
        if not path.is_dir():
            raise TokenizerError(f"tokenizer: {path} is not a local model directory")
        template = _load_chat_template(path)
        strings = _special_token_strings(path)
        tok_file = path / "tokenizer.json"
        digest = hashlib.sha256()
        encode: Callable[[str], list[int]]
        decode: Callable[[list[int]], str]
        if tok_file.is_file():
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(tok_file))
            digest.update(tok_file.read_bytes())
            specials = {t["id"] for t in json.loads(tok_file.read_text()).get("added_tokens", []) if t.get("special")}
            encode = lambda text: tok.encode(text, add_special_tokens=False).ids  # noqa: E731
            decode = lambda ids: tok.decode(list(ids), skip_special_tokens=False)  # noqa: E731
            vocab = tok.get_vocab_size(with_added_tokens=True)
        else:
            try:
                from transformers import AutoTokenizer

                hf = AutoTokenizer.from_pretrained(str(path))
            except Exception as e:
                raise TokenizerError(f"tokenizer: cannot load one from {path}: {e}") from e
            specials = set(hf.all_special_ids)
            encode = lambda text: hf.encode(text, add_special_tokens=False)  # noqa: E731
            # One sequence decodes to one str: transformers types decode as str | list[str] for
            # both its one-sequence and its batch input, without an overload telling them apart.
            decode = lambda ids: cast(str, hf.decode(list(ids), skip_special_tokens=False))  # noqa: E731
            vocab = len(hf)
            template = template or getattr(hf, "chat_template", None)
            digest.update(str(path).encode())
        digest.update((template or "").encode())
        return cls(encode, decode, vocab, specials, template, strings, digest.hexdigest()[:16])

    def encode(self, text: str) -> list[int]:
        return list(self._encode(text))

    def decode(self, ids) -> str:
        return self._decode([int(i) for i in ids])

    @cached_property
    def allowed_ids(self) -> np.ndarray:
        """Token ids a random prompt may use: everything but special tokens."""
        ids = np.arange(self.vocab_size, dtype=np.int64)
        if self.special_ids:
            ids = ids[~np.isin(ids, np.fromiter(self.special_ids, dtype=np.int64))]
        return ids

    @cached_property
    def text_safe_ids(self) -> np.ndarray:
        """Allowed ids that decode on their own to printable text (no partial UTF-8, no controls).

        Chat prompts are text: ids that decode to U+FFFD re-encode unpredictably, which makes
        exact lengths hard to hit.
        """

        def texty(t: str) -> bool:
            return bool(t) and "\ufffd" not in t and all(c.isprintable() or c in " \n" for c in t)

        ok = [i for i in self.allowed_ids.tolist() if texty(self._decode([i]))]
        return np.asarray(ok if ok else self.allowed_ids, dtype=np.int64)

    @cached_property
    def filler(self) -> str | None:
        """A word that adds exactly one token per repetition when appended (" word" x n).

        Pre-tokenizers split at spaces, so such a word re-encodes on its own: the fine
        adjustment that makes a chat prompt hit its exact length.
        """
        import re

        word = re.compile(r"^ [A-Za-z]{2,}$")
        for i in self.allowed_ids.tolist():
            text = self._decode([i])
            if word.match(text) and all(
                len(self._encode("x." + text * r)) - len(self._encode("x.")) == r for r in (1, 2, 5)
            ):
                return text
        return None

    @cached_property
    def _template(self):
        if not self.chat_template:
            return None
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise TemplateError(message)

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
        env.globals["raise_exception"] = raise_exception
        return env.from_string(self.chat_template)

    @property
    def can_render_chat(self) -> bool:
        return self._template is not None

    def render_chat(self, messages: list[dict[str, Any]]) -> str:
        if self._template is None:
            raise TokenizerError("this tokenizer has no chat template")
        return self._template.render(
            messages=messages, add_generation_prompt=True, **{k: v for k, v in self.special_strings.items() if v}
        )

    def count_chat(self, messages: list[dict[str, Any]]) -> int:
        """Prompt tokens of a chat request as vLLM counts them (template, no extra specials)."""
        return len(self._encode(self.render_chat(messages)))
