"""Providers as installable plugins (issue 32): a package that declares an entry point in the group
`gdpa_bench.providers` is found once it is installed — here really installed, by pip, into a folder put on
PYTHONPATH (what a site-packages is to importlib.metadata) — and runs its cases end to end on the CPU;
`gdpa-bench env` says where every provider came from; a plugin that does not load is one line naming its
distribution and the error, and the other providers still run (docs/DESIGN.md §11)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

PLUGIN_CODE = '''
"""A provider outside gdpa-bench: naive_eager under another name."""
from kernels.naive import NaiveEager
from kernels.registry import register


@register
class PluginNaive(NaiveEager):
    name = "plugin_naive"
    description = "naive_eager, from an installed plugin (tests only)"
'''

BROKEN_CODE = "import gdpa_bench_no_such_dependency  # the plugin's own dependency is missing\n"


def _package(where: Path, dist: str, module: str, code: str, entry: str) -> Path:
    """A source tree of distribution `dist` (version 0.3.1) whose module `module` holds `code`, declaring the
    entry point `entry = module` of the group."""
    src = where / dist
    (src / module).mkdir(parents=True)
    (src / module / "__init__.py").write_text(code)
    (src / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""\
            [build-system]
            requires = ["setuptools>=68"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "{dist}"
            version = "0.3.1"

            [project.entry-points."gdpa_bench.providers"]
            {entry} = "{module}"

            [tool.setuptools]
            packages = ["{module}"]
            """
        )
    )
    return src


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """Both plugins installed by pip into one folder (no network: no dependencies, no build isolation)."""
    base = tmp_path_factory.mktemp("plugins")
    target = base / "site"
    good = _package(base, "gdpa-bench-demo-plugin", "gdpa_demo_plugin", PLUGIN_CODE, "demo")
    broken = _package(base, "gdpa-bench-broken-plugin", "gdpa_broken_plugin", BROKEN_CODE, "broken")
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
    p = subprocess.run(
        [*cmd, "--target", str(target), str(good), str(broken)], capture_output=True, text=True, timeout=300
    )
    if p.returncode != 0:
        pytest.fail(f"pip could not install the test plugins: {p.stderr[-2000:]}")
    assert list(target.glob("gdpa_bench_demo_plugin-0.3.1.dist-info/entry_points.txt"))
    return target


def _bench(site: Path, cwd: Path, *argv: str, broken: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GDPA_BENCH_PROVIDERS"}
    paths = [str(site), str(ROOT)] if broken else [str(ROOT)]
    env.update(PYTHONPATH=os.pathsep.join(paths), OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "bench", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


CONFIG = {
    "name": "plugin",
    "device": "cpu",
    "providers": ["plugin_naive", "naive_eager"],
    "modes": ["fwd"],
    "timing": {"warmup_ms": 1, "rep_ms": 2, "min_reps": 2, "max_reps": 2},
    "power": {"enabled": False},
    "hardware": {"calibrate": False},
    "sets": [{"name": "s", "B": 2, "H": 2, "D": 16, "dtype": "fp32", "max_len": 8,
              "lengths": {"family": "uniform_fill", "fill": 0.5}, "kv": {"rule": "self"}}],
}  # fmt: skip

WARNING = (
    "warning: provider plugin gdpa-bench-broken-plugin 0.3.1 (entry point broken = gdpa_broken_plugin) does not "
    "load: ModuleNotFoundError: No module named 'gdpa_bench_no_such_dependency'"
)


def test_an_installed_plugins_provider_runs_end_to_end_and_a_broken_one_is_one_line(site, tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    p = _bench(site, tmp_path, "run", str(cfg), "--out", "run", "--no-progress")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    # the broken plugin: one line naming its distribution, its version and the error; nothing else on stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(WARNING), lines
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    by = {c["provider"]: c for c in data["cases"]}
    assert by["plugin_naive"]["status"] == "ok" and by["naive_eager"]["status"] == "ok", by
    assert by["plugin_naive"]["tflops"] > 0
    plugins = {p["distribution"]: p for p in data["meta"]["provider_plugins"]}
    assert plugins["gdpa-bench-demo-plugin"]["providers"] == ["plugin_naive"]
    assert (
        plugins["gdpa-bench-demo-plugin"]["version"] == "0.3.1" and plugins["gdpa-bench-demo-plugin"]["error"] is None
    )
    assert "gdpa_bench_no_such_dependency" in plugins["gdpa-bench-broken-plugin"]["error"]
    assert (tmp_path / "run" / "report.md").exists()


def test_env_says_where_each_provider_came_from(site, tmp_path):
    p = _bench(site, tmp_path, "env")
    assert p.returncode == 0, p.stderr[-3000:]
    rows = {line.split()[0]: line for line in p.stdout.splitlines() if line.startswith("  ")}
    assert "plugin gdpa-bench-demo-plugin 0.3.1 (entry point demo = gdpa_demo_plugin)" in rows["plugin_naive"]
    assert " built-in " in rows["naive_eager"]
    tail = p.stdout[p.stdout.index("provider plugins that did not load") :]
    assert "gdpa-bench-broken-plugin 0.3.1" in tail and "gdpa_bench_no_such_dependency" in tail


def test_a_config_naming_a_provider_only_a_broken_plugin_could_add_says_so(site, tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({**CONFIG, "providers": ["broken_kernel"]}))
    p = _bench(site, tmp_path, "list", str(cfg))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    error = p.stderr.strip().splitlines()[-1]
    assert (
        "unknown provider 'broken_kernel'" in error
        and "gdpa-bench-broken-plugin 0.3.1 (entry point broken = gdpa_broken_plugin) did not load" in error
    )


def test_a_plugin_may_not_take_a_built_in_providers_name(tmp_path, monkeypatch, capsys):
    """An entry point whose module registers `naive_eager` again is refused as a whole (one line), and
    the built-in stays."""
    from kernels import registry

    (tmp_path / "usurper.py").write_text(PLUGIN_CODE.replace('"plugin_naive"', '"naive_eager"'))
    monkeypatch.syspath_prepend(str(tmp_path))
    from importlib.metadata import EntryPoint

    builtin = registry.provider_class("naive_eager")
    registry._load_plugin(EntryPoint("usurper", "usurper", registry.ENTRY_POINT_GROUP))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a name already taken (built-in)" in err[0], err
    assert registry.provider_class("naive_eager") is builtin
    assert registry.provider_source("naive_eager").kind == registry.BUILT_IN
    registry._FAILURES.pop()
