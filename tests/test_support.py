"""support: one-line messages, optional-import probing and the environment variables, shared by every
package (one copy each)."""

from __future__ import annotations

import sys

import pytest

from support.environment import listed, provider_modules
from support.optional import import_problem
from support.text import one_line


def test_one_line_of_an_exception_is_its_type_and_first_line():
    exc = RuntimeError("compile failed\n  source line 1\n  source line 2")
    assert one_line(exc) == "RuntimeError: compile failed"
    assert one_line(exc, type_name=False) == "compile failed"
    assert one_line(ValueError("")) == one_line(ValueError(""), type_name=False) == "ValueError"
    long = one_line(ValueError("x" * 1000))
    assert len(long) == 300 and long.endswith("...")


def test_one_line_of_a_text_keeps_every_word():
    assert one_line("a.csv: not readable (ParserError: line 3\n   expected 2 fields)") == (
        "a.csv: not readable (ParserError: line 3 expected 2 fields)"
    )
    assert len(one_line("word " * 200, 40)) == 40


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """Three importable packages: one fine, one needing a module that is absent, one that raises."""
    for name, body in {
        "fine_pkg": "",
        "needy_pkg": "import absent_dependency_xyz\n",
        "broken_pkg": "raise RuntimeError('bad build\\nmore')\n",
    }.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("fine_pkg", "needy_pkg", "broken_pkg"):
        sys.modules.pop(name, None)


def test_import_problem_names_what_is_missing(packages):
    assert import_problem(("fine_pkg",), "fine", ("fine_pkg",), "pip install fine") is None
    assert import_problem(("not_there_pkg",), "there", ("not_there_pkg",), "pip install there") == (
        "there not installed (pip install there)"
    )
    assert import_problem(("needy_pkg",), "needy", ("needy_pkg",), "pip install needy") == (
        "needy is installed but absent_dependency_xyz is missing: "
        "No module named 'absent_dependency_xyz' (pip install needy)"
    )
    assert import_problem(("broken_pkg",), "broken", ("broken_pkg",), "h") == (
        "broken failed to import: RuntimeError: bad build"
    )


def test_environment_lists_are_read_when_asked(monkeypatch):
    monkeypatch.setenv("GDPA_BENCH_PROVIDERS", " a.b, ,c ")
    assert provider_modules() == ("a.b", "c")
    monkeypatch.delenv("GDPA_BENCH_PROVIDERS")
    assert provider_modules() == () and listed("GDPA_BENCH_NOT_SET_XYZ") == ()
