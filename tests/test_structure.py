"""The shape of the code stays as docs/DESIGN.md §2 describes it: every module imports, no import circle,
the layering holds (between the packages and between bench/'s subpackages), no private name crosses a
module boundary, no file over 500 lines."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("support", "workloads", "kernels", "results", "reports", "bench")
# What each package may import (docs/DESIGN.md §2): a package imports only the packages to its left.
# `support` is the bottom every package may use; `results` (the results contract) is below the report and
# the harness, which both go through it.
ALLOWED = {pkg: set(PACKAGES[: i + 1]) for i, pkg in enumerate(PACKAGES)}
# bench/'s subpackages by concern, in the order of the data flow (docs/DESIGN.md §2): a subpackage imports
# only those to its left. `errors` (bench/errors.py) is the bottom every layer raises from; the entry points
# (bench/__init__.py: `bench.run`, bench/__main__.py) are the top.
BENCH_LAYERS = ("errors", "config", "monitor", "case", "profiling", "sweep", "shard", "cli", "__main__", "")
# Under bench/ only the report step draws for people: `render` (a finished run's report) and the commands
# that present results (`history` draws history.html). The runner, the shard merge and the monitor write
# through the results layer and never import the presentation.
REPORT_STEP = {"bench.sweep.report", "bench.cli.reporting", "bench.cli.history"}
# The results layer is the contract, not a picture of it.
PRESENTATION = ("reports", "matplotlib")
MAX_LINES = 500
# Optional dependencies (pyproject extras): a module built on one imports only where it is installed.
OPTIONAL = {"cutlass", "flash_attn", "quack", "cuda", "submitit"}


def module_files() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = module_files()


def imports_of(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(module, imported names, line) for every import in the file — at the top or inside a function:
    a circle through a lazy import is still a circle."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((mod, [a.name for a in node.names], node.lineno))
    return out


def first_party(mod: str) -> bool:
    return mod.split(".")[0] in PACKAGES


def edges() -> dict[str, set[str]]:
    """Module -> the first-party modules it imports (a `from pkg import submodule` counts as the submodule)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for name, path in MODULES.items():
        for mod, names, _ in imports_of(name, path):
            if not first_party(mod):
                continue
            targets = [f"{mod}.{n}" for n in names if f"{mod}.{n}" in MODULES]
            if not targets or len(targets) < len(names):
                targets.append(mod)
            graph[name].update(t for t in targets if t in MODULES and t != name)
    return graph


def test_every_module_imports():
    missing_optional = []
    for name in MODULES:
        if name.endswith("__main__"):
            continue
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] not in OPTIONAL:
                raise
            missing_optional.append(name)
    assert len(missing_optional) < len(MODULES) / 4, missing_optional


def test_no_import_circle():
    graph = edges()
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(" -> ".join([*stack[stack.index(n) :], n]))
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, "import circles:\n" + "\n".join(cycles)


def test_layering():
    bad = []
    for name, path in MODULES.items():
        pkg = name.split(".")[0]
        for mod, _, line in imports_of(name, path):
            if first_party(mod) and mod.split(".")[0] not in ALLOWED[pkg]:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {mod}")
    assert not bad, "\n".join(bad)


def bench_layer(module: str) -> int:
    """The rank of a bench/ module in BENCH_LAYERS: `bench.config.models` -> config's."""
    parts = module.split(".")
    return BENCH_LAYERS.index(parts[1] if len(parts) > 1 else "")


def test_bench_subpackages_import_only_downward():
    assert {p.name for p in (ROOT / "bench").iterdir() if p.is_dir() and (p / "__init__.py").exists()} | {
        p.stem for p in (ROOT / "bench").glob("*.py") if p.stem != "__init__"
    } == set(BENCH_LAYERS) - {""}, "a new bench/ subpackage or module: place it in BENCH_LAYERS (DESIGN §2)"
    bad = []
    for name, path in MODULES.items():
        if name.split(".")[0] != "bench":
            continue
        for mod, names, line in imports_of(name, path):
            if mod.split(".")[0] != "bench":
                continue
            targets = [f"{mod}.{n}" for n in names if f"{mod}.{n}" in MODULES] or [mod]
            for target in targets:
                if target != "bench" and bench_layer(target) > bench_layer(name):
                    bad.append(f"{path.relative_to(ROOT)}:{line} imports {target} (upward)")
    assert not bad, "\n".join(bad)


def test_only_the_report_step_imports_the_presentation():
    bad = []
    for name, path in MODULES.items():
        pkg = name.split(".")[0]
        for mod, _, line in imports_of(name, path):
            top = mod.split(".")[0]
            if pkg == "results" and top in PRESENTATION:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {mod} (the results layer imports no presentation)")
            if pkg == "bench" and top == "reports" and name not in REPORT_STEP:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {mod} (only {', '.join(REPORT_STEP)} may)")
    assert not bad, "\n".join(bad)


def test_no_private_name_crosses_a_module():
    bad = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        aliases: dict[str, str] = {}  # local name -> first-party module
        for mod, names, line in imports_of(name, path):
            if not first_party(mod) or mod == name:
                continue
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{path.relative_to(ROOT)}:{line} imports {mod}.{n}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if first_party(a.name):
                        aliases[a.asname or a.name.split(".")[0]] = a.name
            elif isinstance(node, ast.ImportFrom) and node.module and first_party(node.module):
                for a in node.names:
                    if f"{node.module}.{a.name}" in MODULES:
                        aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} uses {aliases[node.value.id]}.{node.attr}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("pkg", PACKAGES)
def test_no_file_over_500_lines(pkg):
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / pkg).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"over {MAX_LINES} lines: {long}"


def test_the_checks_can_fail(tmp_path):
    """The circle finder and the private-import finder see what they are meant to see."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from bench.cli.parser import _P\n\ndef f():\n    from bench import cli\n    return cli._P\n")
    b.write_text("from . import x\n")
    found = imports_of("bench.a", a)
    assert ("bench.cli.parser", ["_P"], 1) in found and ("bench", ["cli"], 4) in found
    assert imports_of("bench.sub.b", b) == [("bench.sub", ["x"], 1)]
    assert bench_layer("bench.config.models") < bench_layer("bench.case.timing") < bench_layer("bench.cli.parser")
    assert bench_layer("bench.errors") == 0 and bench_layer("bench") == len(BENCH_LAYERS) - 1
