"""Models named by Hugging Face hub id (`org/name`, `org/name@REVISION`), found in the local cache.

Offline first: a model already in the cache (`HF_HOME`, `HF_HUB_CACHE`) is used as it is, without
asking the hub; one that is not is downloaded only when the hub's offline mode is off
(`HF_HUB_OFFLINE`). What a study records is the snapshot's commit hash, so a resume on another
revision of the same id is refused (search.study: `setup_changes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from serving.model.info import ModelError

# Weights in the formats vLLM does not load, and the originals some repositories carry beside
# the safetensors (Llama's `original/`): a download skips them.
_NOT_SERVED = ["original/*", "*.pth", "*.gguf", "*.h5", "*.msgpack", "*.onnx", "*.ot", "*.tflite"]


@dataclass(frozen=True)
class HubModel:
    repo_id: str
    revision: str | None = None  # a branch, tag or commit hash as given; None: the default branch

    def __str__(self) -> str:
        return pinned(self.repo_id, self.revision)


@dataclass(frozen=True)
class HubSnapshot:
    model: HubModel
    path: Path  # the snapshot directory in the cache
    commit: str  # the commit hash the revision resolved to


def pinned(reference: str, revision: str | None) -> str:
    """How --model names one revision of a hub model (`org/name@REVISION`); a local directory as is."""
    return f"{reference}@{revision}" if revision else reference


def parse(model: str | Path) -> Path | HubModel:
    """`model` as the user meant it: an existing local directory (or anything that reads as a
    path), else a hub id with an optional `@REVISION` (a repository id has no '@')."""
    text = str(model)
    path = Path(text).expanduser()
    if path.exists() or text.startswith(("/", ".", "~")):
        return path
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    repo_id, at, revision = text.partition("@")
    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        return path
    if at and not revision:
        return path
    return HubModel(repo_id, revision or None)


def study_label(model: str | Path) -> str:
    """What a study is named after: the local directory's name, or the hub repository's (without
    the revision, so that a resume on another revision is refused rather than a new study begun)."""
    ref = parse(model)
    return ref.repo_id.rsplit("/", 1)[-1] if isinstance(ref, HubModel) else ref.resolve().name


def downloads_allowed() -> bool:
    from huggingface_hub import constants

    return not constants.HF_HUB_OFFLINE


def cache_dir() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def snapshot(model: HubModel, *, allow_download: bool, cache: Path | None = None) -> HubSnapshot:
    """The cached snapshot of `model`, downloaded first if it is missing and `allow_download`.
    Raises ModelError, in one line, when it is neither cached nor fetched."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache = Path(cache or cache_dir())
    try:
        path = snapshot_download(model.repo_id, revision=model.revision, cache_dir=cache, local_files_only=True)
    except LocalEntryNotFoundError:
        if not allow_download:
            raise ModelError(
                f"model {model}: no such local directory, and not (completely) in the Hugging Face "
                f"cache at {cache}; downloads are off (HF_HUB_OFFLINE=1): fetch it with "
                f"`{_fetch_command(model)}`, or pass a local model directory"
            ) from None
        try:
            path = snapshot_download(
                model.repo_id, revision=model.revision, cache_dir=cache, ignore_patterns=_NOT_SERVED
            )
        except OSError as e:  # every hub error: not found, gated, no network
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ModelError(
                f"model {model}: no such local directory, not in the Hugging Face cache at {cache}, "
                f"and downloading it failed ({reason}); fetch it with `{_fetch_command(model)}`, "
                f"or pass a local model directory"
            ) from None
    return HubSnapshot(model, Path(path), _commit_of(model, Path(path), cache))


def _commit_of(model: HubModel, path: Path, cache: Path) -> str:
    from huggingface_hub import scan_cache_dir

    for repo in scan_cache_dir(cache).repos:
        if repo.repo_id == model.repo_id and repo.repo_type == "model":
            for revision in repo.revisions:
                if revision.snapshot_path.resolve() == path.resolve():
                    return revision.commit_hash
    raise ModelError(f"model {model}: {path} is not a snapshot of the Hugging Face cache at {cache}")


def _fetch_command(model: HubModel) -> str:
    """The hub's own download command, as the installed huggingface_hub names it (`hf` since
    0.34; `huggingface-cli` before)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        scripts = {ep.name for ep in distribution("huggingface_hub").entry_points}
    except PackageNotFoundError:
        scripts = set()
    command = f"{'hf' if 'hf' in scripts else 'huggingface-cli'} download {model.repo_id}"
    return f"{command} --revision {model.revision}" if model.revision else command
