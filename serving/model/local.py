"""The default model: a small random-weight Llama built here, with a tokenizer trained here.

No model hub is needed. Output lengths are pinned with `ignore_eos` + `max_tokens`, so the
weights only have to be the right shape: timing depends on the architecture, not on what the
model says. Everything is seeded, so two machines build byte-identical weights and tokenizer.

Size (see docs/serving.md, "The default model"): hidden 512, 4 layers, 8 heads of 64, 4 KV heads,
fp32. On a 2-core AVX2 CPU a 2048-token prefill step takes ~0.7 s and a 32-sequence decode
step ~30 ms, so prefill budget (max-num-batched-tokens) and batch width (max-num-seqs) move
TTFT, TPOT and throughput by 2-4x, while the server still starts in ~30 s (eager).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from serving.machine import cache_root

BUILDER_VERSION = 1
SPEC_FILE = "autotune-model.json"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


@dataclass(frozen=True)
class TinyLlamaSpec:
    hidden_size: int = 512
    num_layers: int = 4
    num_heads: int = 8  # head_dim 64: a head size the CPU attention backend supports
    num_kv_heads: int = 4
    intermediate_size: int = 1344
    vocab_target: int = 4096
    max_position_embeddings: int = 8192
    dtype: str = "float32"  # bf16 matmuls are ~37x slower than fp32 on CPUs without AVX-512 BF16
    seed: int = 0

    def digest(self) -> str:
        payload = json.dumps({"builder": BUILDER_VERSION, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


DEFAULT_SPEC = TinyLlamaSpec()

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def default_model_dir(spec: TinyLlamaSpec = DEFAULT_SPEC) -> Path:
    return cache_root() / "models" / f"tiny-llama-{spec.digest()}"


def is_built(dest: Path) -> bool:
    return (Path(dest) / SPEC_FILE).exists()


def has_weights(model_dir: Path) -> bool:
    return any(p.suffix in WEIGHT_SUFFIXES for p in Path(model_dir).iterdir())


def _corpus(rng: random.Random, n_lines: int = 40_000) -> list[str]:
    """Pseudo-words made of syllables: enough variety for a ~4k BPE vocabulary."""
    syllables = [a + b for a in "bdfgklmnprstvz" for b in ("a", "e", "i", "o", "u", "ai", "ou")]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(12_000)]
    punct = [".", ",", "?", "!", ":", ";"]
    lines = []
    for _ in range(n_lines):
        n = rng.randint(4, 24)
        lines.append(" ".join(rng.choice(words) for _ in range(n)) + rng.choice(punct))
    return lines


def _train_tokenizer(spec: TinyLlamaSpec, out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(spec.seed)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_target,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(rng), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def write_config_and_weights(spec: TinyLlamaSpec, tokenizer, out: Path, weights: bool = True) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        # Transformers 5 calls it `dtype` and its typed signature lacks this name, which it still
        # takes (and which is the only one transformers 4 knows).
        torch_dtype=spec.dtype,  # type: ignore[call-arg]
    )
    if not weights:
        config.save_pretrained(out)
        return
    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(config).to(getattr(torch, spec.dtype))
    model.save_pretrained(out, safe_serialization=True)


def build(spec: TinyLlamaSpec = DEFAULT_SPEC, dest: Path | None = None, force: bool = False) -> Path:
    """Build (or reuse) the model directory. Atomic: a half-built model is never visible."""
    dest = Path(dest) if dest else default_model_dir(spec)
    if is_built(dest) and not force:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        tokenizer = _train_tokenizer(spec, tmp)
        write_config_and_weights(spec, tokenizer, tmp)
        (tmp / SPEC_FILE).write_text(
            json.dumps({"builder_version": BUILDER_VERSION, "spec": asdict(spec), "digest": spec.digest()}, indent=2)
        )
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def build_dummy_architecture(config_json: Path, dest: Path, spec: TinyLlamaSpec = DEFAULT_SPEC) -> Path:
    """A real architecture's config.json plus our tokenizer, no weights: for `--load-format dummy`.

    The config's vocab is kept (token ids stay below the tokenizer's size, so prompts are valid).
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(spec, dest)
    cfg = json.loads(Path(config_json).read_text())
    if cfg.get("vocab_size", 0) < len(tokenizer):
        raise ValueError(
            f"{config_json}: vocab_size {cfg.get('vocab_size')} is smaller than the "
            f"local tokenizer ({len(tokenizer)} tokens)"
        )
    cfg.setdefault("torch_dtype", "bfloat16")
    # Special tokens must be the local tokenizer's, whatever the original model used.
    cfg.update(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    (dest / "config.json").write_text(json.dumps(cfg, indent=2))
    return dest
