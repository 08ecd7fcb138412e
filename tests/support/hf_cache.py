"""A Hugging Face hub cache laid out as the hub lays one out, built from a local model directory
(no network): `models--org--name/` with `blobs/` named by content hash, `snapshots/<commit>/`
whose files link to the blobs, and `refs/<branch or tag>` holding the commit each names."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

COMMIT_A = "a" * 40
COMMIT_B = "b" * 40


def add_snapshot(cache: Path, repo_id: str, model_dir: Path, commit: str, refs: tuple[str, ...] = ("main",)) -> Path:
    """`model_dir`'s files as snapshot `commit` of `repo_id` in `cache`, named by `refs`; returns the snapshot."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for f in sorted(Path(model_dir).iterdir()):
        if not f.is_file():
            continue
        blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        if not blob.exists():
            try:
                os.link(f, blob)  # the built-in model's weights are ~60 MB: never copied
            except OSError:  # another file system
                blob.symlink_to(f.resolve())
        (snapshot / f.name).symlink_to(os.path.relpath(blob, snapshot))
    point(cache, repo_id, commit, refs)
    return snapshot


def point(cache: Path, repo_id: str, commit: str, refs: tuple[str, ...] = ("main",)) -> None:
    """Move `refs` of `repo_id` to `commit`, as a later download of a newer revision does."""
    ref_dir = cache / f"models--{repo_id.replace('/', '--')}" / "refs"
    ref_dir.mkdir(parents=True, exist_ok=True)
    for ref in refs:
        (ref_dir / ref).write_text(commit)
