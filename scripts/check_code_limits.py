"""The limits `make lint` holds the product packages to beyond ruff's own rules.

- No function over MAX_LINES lines (ruff has no rule for a function's length; the parameter
  limit is ruff's PLR0913, pyproject.toml). A longer function is steps waiting to be named.
- No module over MAX_MODULE_LINES lines: a longer one holds more than one concern, each of which
  deserves a name and a file of its own.
- No two product modules share a file name (`__init__.py` aside): a name says which module it is
  in a traceback, a log line or a conversation without its package.
- With --mypy-coverage, besides: every product module checked by mypy, that is under a path of
  `[tool.mypy] files` and in no `[[tool.mypy.overrides]]` with `ignore_errors`.

One line per violation, exit code 1 if there is any. Pure: it reads the files, runs nothing.

    python scripts/check_code_limits.py [--mypy-coverage] [--root DIR]
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

PRODUCT_PACKAGES = ("app", "search", "serving", "objectives", "loadgen", "storage", "vllm_http")
MAX_LINES = 80
MAX_MODULE_LINES = 400

# Functions allowed over the limit: (path, qualified name). Empty: every product function is
# within it. An entry whose function is back within the limit is said (a note, not a failure).
ALLOWED_LONG: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Function:
    path: str  # relative to the root, with forward slashes
    line: int  # of its `def` (decorators not counted)
    name: str  # qualified: Class.method, outer.inner
    lines: int  # from its `def` to its last line

    def line_text(self, limit: int) -> str:
        return f"{self.path}:{self.line} {self.name}: {self.lines} lines (limit {limit})"


def product_files(root: Path, packages: Sequence[str] = PRODUCT_PACKAGES) -> list[Path]:
    return sorted(p for package in packages for p in (root / package).rglob("*.py"))


def functions(source: str, path: str) -> Iterator[Function]:
    """Every function and method in `source`, nested ones included, with its qualified name."""

    def walk(node: ast.AST, prefix: str) -> Iterator[Function]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                end = child.end_lineno or child.lineno
                yield Function(path, child.lineno, name, end - child.lineno + 1)
                yield from walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(ast.parse(source, filename=path), "")


def long_functions(root: Path, limit: int = MAX_LINES) -> list[Function]:
    """The product packages' functions over `limit` lines, allowed ones included."""
    found = []
    for file in product_files(root):
        path = file.relative_to(root).as_posix()
        found += [f for f in functions(file.read_text(), path) if f.lines > limit]
    return found


def check_lengths(root: Path, limit: int = MAX_LINES, allowed: frozenset[tuple[str, str]] = ALLOWED_LONG) -> int:
    long = long_functions(root, limit)
    failing = [f for f in long if (f.path, f.name) not in allowed]
    for f in failing:
        print(f.line_text(limit))
    for path, name in sorted(allowed - {(f.path, f.name) for f in long}):
        print(f"note: {path} {name} is allowed over {limit} lines but no longer is: drop it from ALLOWED_LONG")
    return 1 if failing else 0


def long_modules(root: Path, limit: int = MAX_MODULE_LINES) -> list[str]:
    """One line per product module over `limit` lines."""
    lines = {file.relative_to(root).as_posix(): len(file.read_text().splitlines()) for file in product_files(root)}
    return [f"{path}: {n} lines (module limit {limit})" for path, n in lines.items() if n > limit]


def check_module_lengths(root: Path, limit: int = MAX_MODULE_LINES) -> int:
    long = long_modules(root, limit)
    for line in long:
        print(line)
    return 1 if long else 0


def shared_module_names(root: Path) -> list[str]:
    """One line per file name two or more product modules share."""
    by_name: dict[str, list[str]] = {}
    for file in product_files(root):
        if file.name != "__init__.py":
            by_name.setdefault(file.name, []).append(file.relative_to(root).as_posix())
    return [
        f"{name}: {', '.join(paths)} share a module name" for name, paths in sorted(by_name.items()) if len(paths) > 1
    ]


def check_module_names(root: Path) -> int:
    shared = shared_module_names(root)
    for line in shared:
        print(line)
    return 1 if shared else 0


def _module(path: str) -> str:
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _matches(pattern: str, module: str) -> bool:
    """mypy's override patterns: `a.b` itself, `a.b.*` it and everything under it."""
    if pattern.endswith(".*"):
        base = pattern[:-2]
        return module == base or module.startswith(base + ".")
    return module == pattern


def mypy_gaps(root: Path) -> list[str]:
    """One line per product module mypy does not check: outside `files`, or its errors ignored."""
    mypy = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8")).get("tool", {}).get("mypy", {})
    files = [f.rstrip("/") for f in mypy.get("files", [])]
    ignored = [
        pattern
        for override in mypy.get("overrides", [])
        if override.get("ignore_errors")
        for pattern in ([override["module"]] if isinstance(override["module"], str) else override["module"])
    ]
    gaps = []
    for file in product_files(root):
        path = file.relative_to(root).as_posix()
        module = _module(path)
        if not any(path == f or path.startswith(f + "/") for f in files):
            gaps.append(f"{path}: {module} is not checked by mypy (not under [tool.mypy] files)")
        elif any(_matches(p, module) for p in ignored):
            gaps.append(f"{path}: {module} has its mypy errors ignored (ignore_errors in [[tool.mypy.overrides]])")
    return gaps


def check_mypy_coverage(root: Path) -> int:
    gaps = mypy_gaps(root)
    for line in gaps:
        print(line)
    return 1 if gaps else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--mypy-coverage", action="store_true", help="check mypy's coverage too")
    args = parser.parse_args(argv)
    found = max(check_lengths(args.root), check_module_lengths(args.root), check_module_names(args.root))
    return max(found, check_mypy_coverage(args.root)) if args.mypy_coverage else found


if __name__ == "__main__":
    sys.exit(main())
