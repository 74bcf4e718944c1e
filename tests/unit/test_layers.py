"""The layering of docs/architecture.md: import-linter's contracts in pyproject.toml (no upward import, no cycle
between layers) and no function-level import of a binlake module outside the short list of lazy loaders."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT

PACKAGES = ("binlake", "spark_jobs", "plugins")

# Modules that may import binlake modules inside functions, and why. Anywhere else an import of a binlake module
# goes at the top: a function-level one would hide a cycle from the contracts (which see it all the same, but a
# reader does not). Third-party packages (pyspark, great_expectations, deltalake, ...) may be imported lazily
# anywhere.
LAZY_LOADERS = {
    # `binlake decode` must start fast and without Spark, Great Expectations or Delta: each command imports its
    # modules when it runs.
    "binlake.cli": "each subcommand loads its modules",
    # The engine chosen by name; delta-spark needs pyspark.
    "binlake.lake.engines.factory": "engines load on demand",
    # Airflow parses DAG and plugin files often and in-process: the operators load binlake when they run.
    "plugins.binlake_airflow.tasks": "Airflow parse time",
    # Imported in the Airflow task process, which must not load Delta and Arrow (delta-rs can abort a process at
    # exit): the lake and source modules load in the stage's child process (orchestration/jobs.py).
    "binlake.orchestration.service": "no Delta/Arrow in the Airflow task process",
    "binlake.orchestration.stages": "no Delta/Arrow in the Airflow task process",
    # A source kind loads its cloud SDK (alibabacloud, oss2) only when it is used.
    "binlake.sources": "cloud SDKs on demand",
}

# Single function-level imports of a binlake module that loads a heavy third-party package only some runs need.
LAZY_IMPORTS: dict[str, set[str]] = {
    "binlake.schema.store": {"binlake.storage.oss_tree"},  # oss2 (about a second), only for oss:// stores
    # `binlake ingest --no-gates` loads neither the gates' pydantic settings nor the gates, the quarantine and
    # their mail/webhook/report modules (0.2 s of CPU together, a large share of ingesting a small batch).
    "binlake.lake.ingest": {"binlake.settings"},
    "binlake.quality.stages": {"binlake.quality.gates", "binlake.quality.quarantine"},
}

# Function-level imports that still hide a cycle (issue 15); the list may only shrink. Each entry: importing module
# -> the binlake modules it imports inside functions.
KNOWN_CYCLES: dict[str, set[str]] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PROJECT_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.split(".")
        base = base[: len(base) - node.level + (1 if is_package else 0)]
        return [".".join([*base, node.module] if node.module else base)]
    return [node.module or ""]


def function_level_imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
            module = _module_name(path)
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for func in ast.walk(tree):
                if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(func):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        for name in _imported(node, module, path.name == "__init__.py"):
                            if name.split(".")[0] in PACKAGES:
                                found.setdefault(module, set()).add(name)
    return found


def test_no_function_level_imports_of_binlake_modules() -> None:
    found = function_level_imports()
    assert found, "the scan found nothing at all: it is broken"
    allowed = {m: KNOWN_CYCLES.get(m, set()) | LAZY_IMPORTS.get(m, set()) for m in found}
    unexpected = {m: sorted(names - allowed[m]) for m, names in found.items()
                  if m not in LAZY_LOADERS and names - allowed[m]}
    assert not unexpected, ("binlake modules imported inside functions (import them at the top; if that makes a "
                            f"cycle, move the shared code down a layer, see docs/architecture.md): {unexpected}")
    listed = {m: KNOWN_CYCLES.get(m, set()) | LAZY_IMPORTS.get(m, set()) for m in {*KNOWN_CYCLES, *LAZY_IMPORTS}}
    stale = {m: sorted(names - found.get(m, set())) for m, names in listed.items() if names - found.get(m, set())}
    assert not stale, f"no longer imported inside a function, remove from {__file__}: {stale}"


def test_scan_sees_relative_and_absolute_imports() -> None:
    tree = ast.parse("def f():\n    from ..lake import pipeline\n    from . import x\n    import binlake.cli\n")
    nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    got = [name for n in nodes for name in _imported(n, "binlake.quality.gates", False)]
    assert got == ["binlake.lake", "binlake.quality", "binlake.cli"]
    got = [name for n in nodes for name in _imported(n, "binlake.quality", True)]
    assert got == ["binlake.lake", "binlake.quality", "binlake.cli"]


def test_import_linter_contracts_are_kept() -> None:
    """pyproject.toml [tool.importlinter]: the layers of docs/architecture.md, whole-package and module imports
    alike (function-level ones included)."""
    pytest.importorskip("importlinter", reason="import-linter is not installed (the `test` extra)")
    proc = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                           "sys.exit(lint_imports_command())", "--no-cache", "--no-logo", "pyproject.toml"],
                          cwd=PROJECT_ROOT, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "KEPT" in proc.stdout, proc.stdout + proc.stderr
