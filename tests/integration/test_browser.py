"""The report and the running optuna-dashboard of a finished real study, in headless Chromium.

Chromium is Debian's (`scripts/setup_browser.sh`, run by `make test`), driven by Playwright's
Python package. Without it these tests skip, or fail under AUTOTUNE_REQUIRE_BROWSER=1 (CI).
Screenshots go to the artifacts directory (test-artifacts/ by default).
"""

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from sqlalchemy.orm import Session

from app.outputs.trial_views import category_of
from storage import database, queries
from tests.support.cli import autotune_forked, spawn_forked
from tests.support.paths import E2E_SCENARIO

pytestmark = [pytest.mark.browser, pytest.mark.vllm]  # the finished study starts real servers

CHROMIUM = os.environ.get("AUTOTUNE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LEGEND = {
    "feasible": "feasible (meets every SLO)",
    "infeasible": "infeasible (violates an SLO)",
    "failed": "failed (never served; drawn at the worst edge)",
}


def _unavailable(reason: str):
    if os.environ.get("AUTOTUNE_REQUIRE_BROWSER") == "1":
        pytest.fail(f"browser tests required (AUTOTUNE_REQUIRE_BROWSER=1): {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium context with a fresh profile. Requested first by the tests, so a
    missing Chromium is reported before minutes go into the finished study.

    Module scope, not session: playwright's sync API holds an asyncio loop as the thread's
    running loop until it exits, and every later ``asyncio.run`` in the session would fail."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (dev extra)")
    if not Path(CHROMIUM).exists():
        _unavailable(f"no Chromium at {CHROMIUM}: run scripts/setup_browser.sh (make test does)")
    with tempfile.TemporaryDirectory(prefix="autotune-chromium-") as profile, sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1500, "height": 1000},
        )
        try:
            yield ctx
        finally:
            ctx.close()


def expected_categories(finished_study) -> dict[int, str]:
    with Session(database.open_db(finished_study["storage"])) as s:
        rec = queries.require_study(s, finished_study["study"])
        return {r.trial_number: category_of(r) for r in queries.trial_records(s, rec) if r.status != "interrupted"}


def test_report_shows_figures_and_feasibility_offline(browser, finished_study, artifacts_dir):
    auto = finished_study["run_dir"] / "report.html"
    assert auto.is_file(), "the study writes its report when it ends"
    out = artifacts_dir / "report.html"
    # The scenario as search was given it: its path names the study.
    proc = autotune_forked("report", E2E_SCENARIO, "--storage", finished_study["storage"], "--out", out, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    expected = expected_categories(finished_study)
    assert set(expected.values()) >= {"feasible", "failed"}  # the e2e study has both

    page = browser.new_page()
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(out.as_uri())
    page.wait_for_selector("#fig-pareto-0-1 .main-svg", timeout=30_000)
    assert all(u.startswith(("file:", "data:", "blob:")) for u in requests), (
        f"the report must work offline, it fetched: {[u for u in requests if not u.startswith('file:')]}"
    )
    assert page.evaluate("typeof window.Plotly") == "object"  # inlined, not from a CDN

    for div in ("pareto-0-1", "hypervolume", "objective-vs-parameter", "bottlenecks"):
        assert page.locator(f"#fig-{div} .main-svg").count() >= 1, f"figure {div} not drawn"
    legend = page.locator("#fig-pareto-0-1 .legendtext").all_text_contents()
    for cat, label in LEGEND.items():
        n = sum(c == cat for c in expected.values())
        assert f"{label}: {n}" in legend, (cat, legend)
    assert any(t.startswith("baselines") for t in legend)

    rows = page.locator("#trials-table tbody tr")
    shown = {
        int(rows.nth(i).get_attribute("data-trial")): rows.nth(i).get_attribute("data-category")
        for i in range(rows.count())
    }
    assert shown == expected
    for number, cat in expected.items():
        mark = page.locator(f'#trials-table tr[data-trial="{number}"] .mark-{cat}')
        assert mark.count() == 1 and mark.inner_text() == cat
    failed = [n for n, c in expected.items() if c == "failed"]
    row = page.locator(f'#trials-table tr[data-trial="{failed[0]}"]').inner_text()
    assert "invalid_config" in row and "startup_failure" in row  # failure class and diagnosis

    verdict = page.locator("#verdict").inner_text()
    summary = json.loads(page.locator("#report-summary").inner_text())
    # the confirmed verdict: what to deploy, and the baseline that never served named as left out
    assert verdict.startswith(("deploy ", "keep ", "no configuration is recommended"))
    if summary["chosen"] is not None:
        assert f"trial {summary['chosen']}" in verdict.splitlines()[0]
    assert "baseline broken (trial" in verdict and "failed in the search" in verdict
    # Sorting: a click on "trial" sorts ascending, a second click descending.
    header = page.locator("#trials-table th", has_text="trial").first
    header.click()
    header.click()
    assert rows.first.get_attribute("data-trial") == str(max(expected))
    page.screenshot(path=str(artifacts_dir / "report.png"), full_page=True)
    page.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


@pytest.fixture
def dashboard(finished_study, artifacts_dir):
    """`autotune dashboard` in a process of its own (forked: it serves in that process, and starts
    none), stopped with SIGTERM."""
    port = free_port()
    proc = spawn_forked(
        "app.cli",
        "dashboard",
        "--study",
        finished_study["study"],
        "--storage",
        finished_study["storage"],
        "--port",
        port,
        stdout=artifacts_dir / "dashboard.log",
        stderr=None,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (artifacts_dir / "dashboard.log").read_text()[-2000:]
            try:
                get_json(base + "/api/studies")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("optuna-dashboard did not answer within 120 s")
                time.sleep(0.5)
        yield base, port, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_dashboard_tells_feasibility_metrics_and_diagnosis(browser, finished_study, dashboard, artifacts_dir):
    base, port, _proc = dashboard
    listening = [
        c.laddr.ip
        for c in psutil.net_connections("tcp")
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
    ]
    assert listening == ["127.0.0.1"]
    expected = expected_categories(finished_study)

    study_id = next(
        s["study_id"]
        for s in get_json(base + "/api/studies")["study_summaries"]
        if s["study_name"] == finished_study["study"]
    )
    detail = get_json(f"{base}/api/studies/{study_id}")
    figures = {g["id"] for g in detail["plotly_graph_objects"]}
    assert {
        "feasible-pareto-front",
        "optuna-pareto-front-constraints",
        "hypervolume-history",
        "bottlenecks",
        "all-trials",
    } <= figures
    assert "Feasible Pareto front" in detail["note"]["body"]
    marks = {"feasible": "FEASIBLE", "infeasible": "INFEASIBLE", "failed": "FAILED"}
    for t in detail["trials"]:
        cat = expected[t["number"]]
        note = t["note"]["body"]
        assert f": {marks[cat]}" in note and "Bottleneck:" in note, (t["number"], note[:300])
        attrs = {a["key"]: a["value"] for a in t["user_attrs"]}
        assert attrs["feasible"] == str(cat == "feasible")
        assert t["constraints"], "constraints mirrored into the list optuna-dashboard 0.21 reads"
        assert (max(t["constraints"]) > 0) == (cat != "feasible")
        if cat != "failed":
            assert "m:ttft_p95_ms" in attrs and "Every measured metric" in note
        else:
            assert "failure" in attrs

    page = browser.new_page()
    page.goto(f"{base}/dashboard/studies/{study_id}")
    pareto = page.locator('[id="user-defined-plot:feasible-pareto-front"]')
    pareto.locator(".main-svg").first.wait_for(timeout=60_000)
    legend = pareto.locator(".legendtext").all_text_contents()
    for cat, label in LEGEND.items():
        assert f"{label}: {sum(c == cat for c in expected.values())}" in legend, legend
    page.locator('[id="user-defined-plot:all-trials"] .main-svg').first.wait_for(timeout=30_000)
    page.wait_for_timeout(1500)
    page.screenshot(path=str(artifacts_dir / "dashboard_study.png"), full_page=True)

    failed = next(n for n, c in expected.items() if c == "failed")
    page.goto(f"{base}/dashboard/studies/{study_id}/trials")
    page.get_by_text(f"Trial {failed}", exact=True).first.click()
    page.get_by_text("FAILED (never served)").first.wait_for(timeout=30_000)
    body = page.locator("body").inner_text()
    assert "Bottleneck: startup failure" in body and "invalid_config" in body
    page.screenshot(path=str(artifacts_dir / "dashboard_trial_failed.png"), full_page=True)
    page.close()
