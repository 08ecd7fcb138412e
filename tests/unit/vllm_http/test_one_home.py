"""The tuner's HTTP to a vLLM server besides the load has one home, `vllm_http`: no other product
module writes one of its endpoints' paths as a URL path (docstrings, comments and messages that
name an endpoint in words are not URLs). The one exception is the route the tuner's vLLM plugin
serves: the plugin runs in the server's Python, which may not have `vllm_http`, so it spells the
path once itself, equal to `vllm_http.RECONFIGURE`."""

from __future__ import annotations

import ast
import re
import tomllib

import pytest

import vllm_http
from serving.process.entry.autotune_vllm_plugin import route
from tests.support.paths import REPO

HOME = "vllm_http"
# A path at a string's start (`base_url + "/health"`, `f"{url}/health"`) or after a URL's host,
# followed by nothing, a query or a deeper path: a URL, where "/health did not answer" is words.
URL_PATH = re.compile(
    r"(?:^|//[^/\s]+)/(?:health|metrics|v1/models|tokenize|reset_prefix_cache|autotune/reconfigure)(?=$|[/?#])"
)
# The server's side of the tuner's own route: imported by path in the server's Python.
PLUGIN_ROUTE = "serving/process/entry/autotune_vllm_plugin/route.py"


def product_packages() -> list[str]:
    """What the distribution ships (pyproject.toml's `packages.find`), the home aside."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    return [pattern.rstrip("*") for pattern in include if pattern.rstrip("*") != HOME]


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def url_paths(source: str) -> list[tuple[int, str]]:
    """(line, string) of every string in `source` that writes an endpoint's path as a URL path;
    f-strings' literal parts included, docstrings not."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and URL_PATH.search(node.value)
    ]


@pytest.mark.parametrize(
    "source",
    [
        'session.get(base_url + "/health")',
        'session.get(f"{base_url}/metrics", timeout=t)',
        'urlopen("http://127.0.0.1:8000/v1/models")',
        'PATH = "/reset_prefix_cache"',
        'url = base + "/tokenize?add_special_tokens=false"',
        'exchange(host, port, "POST", "/autotune/reconfigure", json_body=knobs, timeout_s=30)',
        'async def f(url):\n    """GET /health."""\n    return await get(url + "/health")',
    ],
)
def test_a_url_path_is_found(source):
    assert url_paths(source)


@pytest.mark.parametrize(
    "source",
    [
        '"""Asks /health, then reads /metrics."""',
        'def f():\n    """GET /v1/models: the served model."""',
        'watch.ask("GET /health", now)',
        'evidence = f"/health did not answer within {t:g} s"',
        'note = "no /metrics: did not wait for the server to drain"',
        "x = 1  # POST /reset_prefix_cache",
        'PATHS = {"completions": "/v1/completions"}',
        'name = "/metrics_snapshot.json"',
        'reason = "no /autotune/reconfigure route on this server"',
    ],
)
def test_words_that_name_an_endpoint_are_not_a_url_path(source):
    assert url_paths(source) == []


def test_only_the_home_writes_the_servers_endpoints_as_urls():
    packages = product_packages()
    assert {"loadgen", "serving", "search", "objectives", "app", "storage"} <= set(packages)
    found = [
        f"{path.relative_to(REPO)}:{line}: {text!r}"
        for package in packages
        for path in sorted((REPO / package).rglob("*.py"))
        for line, text in url_paths(path.read_text())
        if (str(path.relative_to(REPO)), text) != (PLUGIN_ROUTE, vllm_http.RECONFIGURE)
    ]
    assert found == [], f"HTTP to a vLLM server outside {HOME}/: ask it through {HOME}'s facade"


def test_the_home_writes_them():
    sources = "".join(path.read_text() for path in (REPO / HOME).rglob("*.py"))
    assert len(url_paths(sources)) == 6  # one constant per endpoint: endpoints.py


def test_the_plugin_serves_the_route_the_tuner_asks_and_spells_it_once():
    assert route.PATH == vllm_http.RECONFIGURE
    assert [text for _, text in url_paths((REPO / PLUGIN_ROUTE).read_text())] == [vllm_http.RECONFIGURE]
