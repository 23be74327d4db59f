"""Whether an optional dependency (a pyproject extra: flash-attn-4, its CuTe DSL) imports here, and if not
why, in one line: a provider that needs it is then `skipped` with that reason instead of failing."""

from __future__ import annotations

import importlib

from support.text import one_line


def import_problem(modules: tuple[str, ...], package: str, roots: tuple[str, ...], hint: str) -> str | None:
    """None when every one of `modules` imports; otherwise why not. `package` is what a user installs
    (e.g. "flash-attn-4"), `roots` the top-level module names that belong to it (a missing one means the
    package is not installed; any other missing module is a broken dependency), `hint` how to install
    it."""
    try:
        for module in modules:
            importlib.import_module(module)
    except ImportError as exc:
        missing = (getattr(exc, "name", None) or "").split(".")[0]
        if missing in (*roots, ""):
            return f"{package} not installed ({hint})"
        return f"{package} is installed but {missing} is missing: {one_line(exc, type_name=False)} ({hint})"
    except Exception as exc:  # any import-time failure is a reason, not a crash
        return f"{package} failed to import: {one_line(exc)}"
    return None
