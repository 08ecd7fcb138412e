"""Facts about a model directory that the pre-start checks need (a local one, or a hub snapshot's)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from serving.model.local import SPEC_FILE, has_weights

_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1}


class ModelError(ValueError):
    pass


@dataclass(frozen=True)
class ModelInfo:
    path: Path
    architecture: str
    max_position_embeddings: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    config_dtype: str
    has_weights: bool
    built_here: bool
    repo_id: str | None = None  # a model named by hub id: `path` is its snapshot in the cache
    revision: str | None = None  # ... and the commit hash that snapshot is

    @property
    def reference(self) -> str:
        """What names this model on the study record: the hub id, or the local directory."""
        return self.repo_id or str(self.path)

    def kv_bytes_per_token(self, dtype: str | None = None) -> int:
        """K and V for every layer, in the serving dtype."""
        width = _DTYPE_BYTES.get((dtype or self.config_dtype).replace("torch.", ""), 2)
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * width


def read(model_dir: str | Path) -> ModelInfo:
    path = Path(model_dir).expanduser().resolve()
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise ModelError(
            f"MODEL={model_dir}: no config.json there. Point MODEL at a local Hugging Face model "
            "directory (config.json + tokenizer) or a hub id in the local cache (org/name[@revision]), "
            "or leave it unset for the built-in default."
        )
    if not any((path / f).exists() for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        raise ModelError(f"MODEL={model_dir}: no tokenizer files (tokenizer.json / tokenizer.model)")
    cfg = json.loads(cfg_file.read_text())
    text_cfg = cfg.get("text_config", cfg)
    heads = text_cfg.get("num_attention_heads", 1)
    head_dim = text_cfg.get("head_dim") or text_cfg.get("hidden_size", 0) // max(heads, 1)
    return ModelInfo(
        path=path,
        architecture=(cfg.get("architectures") or ["unknown"])[0],
        max_position_embeddings=int(text_cfg.get("max_position_embeddings", 2048)),
        num_layers=int(text_cfg.get("num_hidden_layers", 0)),
        num_kv_heads=int(text_cfg.get("num_key_value_heads", heads)),
        head_dim=int(head_dim),
        config_dtype=str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"),
        has_weights=has_weights(path),
        built_here=(path / SPEC_FILE).exists(),
    )
