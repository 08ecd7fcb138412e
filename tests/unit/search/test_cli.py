"""The command line on bad input: clear errors, before any server starts."""

from tests.support.cli import autotune


def test_malformed_scenario_is_rejected_before_any_server_starts(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntitle: t\nworkload:\n  endpoint: chat\n  num_requests: 4\n"
                   "  arrival: {mode: closed, concurrency: 1}\n  prompt_tokens: 10\n  output_tokens: 4\n"
                   "objectives:\n  - {metric: ttft_p95_ms, direction: minimize}\n"
                   "search_space:\n  max_num_seqs: {low: 4, high: 2}\n  gpu_util: {low: 0.1, high: 0.9}\n")
    proc = autotune("search", bad, "--storage", f"sqlite:///{tmp_path / 'x.db'}", "--runs-dir", tmp_path,
                    timeout=120)
    assert proc.returncode == 2
    assert f"autotune: error: {bad}: invalid scenario" in proc.stderr
    assert "search_space: unknown parameter(s) gpu_util; tunable parameters:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "bad").exists()  # no study dir: nothing was started


def test_unknown_scenario_name(tmp_path):
    proc = autotune("search", "chatbot", "--runs-dir", tmp_path, timeout=60)
    assert proc.returncode == 2
    assert "unknown scenario 'chatbot'; built-in scenarios: api_service, batch_processing, mixed, online_chat" in proc.stderr


def test_confirm_needs_a_stored_study_and_creates_nothing_without_one(tmp_path):
    db = tmp_path / "none.db"
    proc = autotune("confirm", "mixed", "--storage", f"sqlite:///{db}", "--runs-dir", tmp_path, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"autotune: error: no study named 'mixed' in sqlite:///{db}; run `autotune search mixed` first" in proc.stderr
    assert not db.exists() and not (tmp_path / "mixed").exists()


def test_confirm_runs_must_be_a_count(tmp_path):
    proc = autotune("search", "mixed", "--confirm-runs", "-1", "--runs-dir", tmp_path, timeout=60)
    assert proc.returncode == 2 and "argument --confirm-runs: must be a whole number >= 0, got '-1'" in proc.stderr


def test_a_scenario_given_by_path_names_the_study_as_search_does(tmp_path):
    # `search configs/x.yaml` stores the study under the scenario's `name:`; export, report and
    # dashboard given the same path must look for that study, not for one named after the path.
    from search.scenario import CONFIG_DIR

    copy = tmp_path / "my-mixed.yaml"
    copy.write_text((CONFIG_DIR / "mixed.yaml").read_text())
    db = tmp_path / "none.db"
    proc = autotune("report", copy, "--storage", f"sqlite:///{db}", "--runs-dir", tmp_path, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "no study named 'mixed' in this database" in proc.stderr


def test_a_missing_workload_file_is_one_line(tmp_path):
    missing = tmp_path / "missing.yaml"
    proc = autotune("load", "--workload", missing, "--url", "http://127.0.0.1:9", timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"autotune: error: --workload {missing}: no such file"


def test_a_study_name_cannot_leave_the_runs_directory(tmp_path):
    proc = autotune("search", "mixed", "--study", "../elsewhere", "--runs-dir", tmp_path, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "argument --study: '../elsewhere': use letters, digits" in proc.stderr
    assert not (tmp_path.parent / "elsewhere").exists()
