"""Scenario files: the shipped ones (`CONFIG_DIR`) found by name, a file read and validated with
every error on lines that name the file and the field (`ScenarioError`), and the digest a
study stores with the scenario's text."""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

import yaml
from pydantic import ValidationError

from search.scenario.definition import Scenario


def _shipped_dir() -> Path:
    """The `configs` package's directory: configs/ of the checkout under an editable install or
    with the checkout on the path, its installed copy otherwise (a wheel, a container image)."""
    try:
        found = resources.files("configs")
    except ModuleNotFoundError:  # an editable install made before configs/ became a package
        raise ImportError(
            "the shipped scenarios (package `configs`) are not installed: reinstall the project (make setup)"
        ) from None
    if not isinstance(found, Path):  # a zipped install: pip never makes one
        raise ImportError(f"the shipped scenarios are not files on disk ({found!r}); install the project unzipped")
    return found.resolve()


# The shipped scenarios, found by name (`configs/<name>.yaml`), and the model shapes (`models/`).
CONFIG_DIR = _shipped_dir()


class ScenarioError(ValueError):
    pass


def _format_error(path: str, err: ValidationError) -> str:
    lines = [f"{path}: invalid scenario"]
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"] if not str(x).startswith("function-after"))
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        elif e["type"] == "literal_error":
            msg = f"{msg} (got {e.get('input')!r})"
        lines.append(f"  {loc}: {msg}" if loc else f"  {msg}")  # a model check names its field itself
    return "\n".join(lines)


def resolve_path(name_or_path: str | Path) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise ScenarioError(f"{p}: no such scenario file")
        return p
    candidate = CONFIG_DIR / f"{name_or_path}.yaml"
    if not candidate.exists():
        known = sorted(f.stem for f in CONFIG_DIR.glob("*.yaml"))
        raise ScenarioError(
            f"unknown scenario {name_or_path!r}; built-in scenarios: "
            f"{', '.join(known)} (or pass a path to your own YAML file)"
        )
    return candidate


def load(name_or_path: str | Path) -> tuple[Scenario, str, str]:
    """(scenario, source text, path shown in messages). Raises ScenarioError."""
    path = resolve_path(name_or_path)
    shown = str(path.relative_to(CONFIG_DIR.parent)) if path.is_relative_to(CONFIG_DIR.parent) else str(path)
    text = path.read_text()
    return parse(text, shown, path.parent.resolve()), text, shown


def _yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's error on one line: where (1-based line and column) and what, without its
    multi-line excerpt of the file."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None)
    if mark is None or problem is None:
        return " ".join(str(e).split())
    context, at = getattr(e, "context", None), getattr(e, "context_mark", None)
    context = (
        (f" ({context}" + (f" at line {at.line + 1}, column {at.column + 1}" if at else "") + ")") if context else ""
    )
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}{context}"


def read_mapping(text: str, shown: str) -> dict:
    """A YAML file's top-level mapping (a scenario, a workload file); ScenarioError, one line
    beginning with `shown`, for anything else."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ScenarioError(f"{shown}: not valid YAML: {_yaml_problem(e)}") from e
    if not isinstance(data, dict):
        raise ScenarioError(f"{shown}: expected a mapping at the top level")
    return data


def parse(text: str, shown: str, base_dir: Path) -> Scenario:
    """A scenario's source text, validated; errors begin with `shown` (the file, or where the text
    is stored). Relative workload files are read from `base_dir`. Raises ScenarioError."""
    data = read_mapping(text, shown)
    try:
        return Scenario.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as e:
        raise ScenarioError(_format_error(shown, e)) from None


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
