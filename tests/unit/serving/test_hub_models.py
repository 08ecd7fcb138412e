"""--model org/name[@revision]: resolved offline through a Hugging Face cache laid out as the hub
lays it out (built here from the built-in model), the snapshot's commit recorded with the study,
a resume on another commit refused; downloads only where allowed (never here: no hub access)."""

import re
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from search.study import StudyMismatch
from serving import ModelError, build_default_model
from serving.context import resolve_model
from storage import queries
from tests.support.fakes import ctx as fake_ctx
from tests.support.hf_cache import COMMIT_A, COMMIT_B, add_snapshot, point
from tests.support.scripted_executor import ScriptedExecutor
from tests.support.study_loop import runner

REPO_ID = "autotune-test/tiny-llama"


@pytest.fixture(scope="module")
def built_in_model() -> Path:
    return build_default_model()


@pytest.fixture
def hf_home(tmp_path, built_in_model, monkeypatch) -> Path:
    """HF_HOME with the built-in model as REPO_ID at COMMIT_A (main) and COMMIT_B (tag v2), offline."""
    from huggingface_hub import constants

    home = tmp_path / "hf"
    add_snapshot(home / "hub", REPO_ID, built_in_model, COMMIT_A, refs=("main",))
    add_snapshot(home / "hub", REPO_ID, built_in_model, COMMIT_B, refs=("v2",))
    # The hub library reads these once, at import; the CLI's own process gets them from the environment.
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return home


@pytest.fixture
def no_network(monkeypatch):
    """Any download attempt fails the test."""
    import huggingface_hub

    real = huggingface_hub.snapshot_download

    def cached_only(*args, **kw):
        assert kw.get("local_files_only"), "a download was attempted"
        return real(*args, **kw)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", cached_only)


def test_a_hub_id_is_its_cached_snapshot_and_commit(hf_home, no_network):
    info = resolve_model(REPO_ID)
    assert info.path == (hf_home / "hub" / "models--autotune-test--tiny-llama" / "snapshots" / COMMIT_A).resolve()
    assert (info.repo_id, info.revision, info.reference) == (REPO_ID, COMMIT_A, REPO_ID)
    assert info.architecture == "LlamaForCausalLM" and info.has_weights


@pytest.mark.parametrize("revision, commit", [("main", COMMIT_A), ("v2", COMMIT_B), (COMMIT_B, COMMIT_B)])
def test_a_revision_after_the_id_picks_that_snapshot(hf_home, no_network, revision, commit):
    info = resolve_model(f"{REPO_ID}@{revision}")
    assert info.path.name == commit and info.revision == commit and info.reference == REPO_ID


def test_a_local_directory_is_read_as_before(built_in_model, no_network):
    info = resolve_model(str(built_in_model))
    assert info.path == built_in_model.resolve() and info.repo_id is None and info.revision is None
    assert info.reference == str(built_in_model.resolve())


def test_an_id_not_in_the_cache_is_one_line_naming_it_the_cache_and_the_fetch_command(hf_home, no_network):
    with pytest.raises(ModelError) as e:
        resolve_model("autotune-test/not-here@v9")
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(
        "model autotune-test/not-here@v9: no such local directory, and not (completely) "
        f"in the Hugging Face cache at {hf_home / 'hub'}; downloads are off (HF_HUB_OFFLINE=1)"
    )
    assert message.endswith("download autotune-test/not-here --revision v9`, or pass a local model directory")


def test_a_missing_model_is_downloaded_only_where_downloads_are_allowed(hf_home, built_in_model, monkeypatch):
    import huggingface_hub

    real = huggingface_hub.snapshot_download
    downloads = []

    def hub(repo_id, *, revision=None, cache_dir=None, local_files_only=False, **kw):
        if not local_files_only:  # what a download leaves in the cache
            downloads.append((repo_id, revision, kw.get("ignore_patterns")))
            add_snapshot(Path(cache_dir), repo_id, built_in_model, COMMIT_B, refs=("main",))
        return real(repo_id, revision=revision, cache_dir=cache_dir, local_files_only=True)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", hub)
    with pytest.raises(ModelError):
        resolve_model("autotune-test/elsewhere", allow_download=False)
    assert downloads == []
    info = resolve_model("autotune-test/elsewhere", allow_download=True)
    assert [d[:2] for d in downloads] == [("autotune-test/elsewhere", None)] and "original/*" in downloads[0][2]
    assert (info.repo_id, info.revision) == ("autotune-test/elsewhere", COMMIT_B)
    resolve_model("autotune-test/elsewhere", allow_download=True)  # now cached: no second download
    assert len(downloads) == 1


def _hub_ctx(model: str):
    return replace(fake_ctx(), model=resolve_model(model))


def test_the_study_records_the_commit_and_refuses_a_resume_on_another(hf_home, no_network, tmp_path):
    from app import workers

    runner(tmp_path, ScriptedExecutor(), trials=1, launch_ctx=_hub_ctx(REPO_ID)).run()
    r = runner(tmp_path, ScriptedExecutor(), trials=1, launch_ctx=_hub_ctx(REPO_ID))
    with Session(r.engine) as session:
        rec = queries.require_study(session, "loop")
        assert (rec.model_path, rec.model_revision) == (REPO_ID, COMMIT_A)
    # A worker joining from another host resolves the very commit the study began on.
    assert workers.joined_study(r.prep.storage_url, "loop", tmp_path).model == f"{REPO_ID}@{COMMIT_A}"

    point(hf_home / "hub", REPO_ID, COMMIT_B)  # main moved on: a newer download of the same id
    again = ScriptedExecutor()
    with pytest.raises(
        StudyMismatch,
        match=re.escape(f"study 'loop' was measured elsewhere (model revision was {COMMIT_A}, now {COMMIT_B})"),
    ):
        runner(tmp_path, again, trials=2, launch_ctx=_hub_ctx(REPO_ID)).run()
    assert again.plans == []
    runner(tmp_path, again, trials=2, launch_ctx=_hub_ctx(f"{REPO_ID}@{COMMIT_A}")).run()  # the study's commit resumes
    assert len(again.plans) == 1


def test_a_study_on_a_hub_id_is_named_after_the_repository_without_the_revision():
    from search.prepare import default_study_name

    assert default_study_name("mixed", f"{REPO_ID}@{COMMIT_A}") == "mixed-tiny-llama"
    assert default_study_name("mixed", REPO_ID) == "mixed-tiny-llama"
    assert default_study_name("mixed", "/models/Llama-3-8B") == "mixed-Llama-3-8B"
