"""A provider's own environment (docs/DESIGN.md §5, §11): the cases of a provider entry that names one run in
a worker process started with it, never in the process that runs the other providers.

    providers:
      - {name: meta_gdpa, label: meta_gdpa_ws, options: {...}, environment: {prepend_path: [/tmp/fbtriton-site]}}
      - {name: my_kernel, environment: {python: ~/venvs/fbtriton/bin/python}}

`python` is another interpreter (a venv made with `--system-site-packages` sees the harness's packages);
`prepend_path` lists site folders put first on the worker's PYTHONPATH, e.g. one holding another `triton`
(Meta's fork `fbtriton` installs as `triton`, so it cannot share a process with stock Triton). A relative
path is the repository root's, `~` is expanded; a venv's interpreter is used as named, not resolved (a
venv's `python` is a link to the base interpreter, which would lose the venv).

Everything else about such a case is the harness's own: the worker is the normal runner (`run --worker`),
so the batch (same seed), the correctness gate against the fp32 reference, the timer, the power window
and the record are those of every other case. The run is a sequence of *legs*, one worker per
environment, the harness's own first, each writing the same run folder (`--resume` after the first) and
running only its providers' labels; a fresh worker after a fault or a hang continues its leg.

Checked before the first case (`legs`), each a one-line UsageError, exit 2: a path that does not exist,
an interpreter (or a site folder) with which the harness cannot import torch and its own requirements (a
probe: `PROBE`, in a subprocess with a timeout), and any environment under `--isolation none`, where
every case runs in the command's own process (so `bench.run`, which runs in the caller's process, refuses
them too). Each case records the environment that ran it and the Triton it imported (`record`).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from bench.errors import UsageError
from support.text import one_line

REPO_ROOT = Path(__file__).resolve().parents[2]
PROBE_TIMEOUT_S = 120.0  # a cold `import torch` on a loaded machine takes tens of seconds
# Run in the environment: what a worker needs imports, and what it will run with (`describe`).
PROBE = (
    "import json, torch, pydantic, yaml, pandas\n"
    "from bench.sweep.environments import describe\n"
    "print(json.dumps({**describe(), 'torch': torch.__version__}))\n"
)


@dataclass(frozen=True)
class Leg:
    """One worker's share of a run: the environment (None: the harness's own), the labels it runs (None:
    every selected case), the interpreter and the folders put first on its PYTHONPATH."""

    environment: dict | None
    labels: tuple[str, ...] | None
    python: str
    prepend: tuple[str, ...] = ()
    found: dict | None = None  # the probe's answer: interpreter, torch, triton

    def command(self, cmd: list[str]) -> list[str]:
        """The worker command `cmd` (a `python -m bench run ... --worker`) for this leg."""
        out = [self.python, *cmd[1:]]
        if self.labels is None:
            return out
        if "--providers" in out:
            out[out.index("--providers") + 1] = ",".join(self.labels)
            return out
        return [*out, "--providers", ",".join(self.labels)]

    def env(self, base: dict) -> dict:
        """The worker's environment variables: `base` with this leg's folders first on PYTHONPATH."""
        if not self.prepend:
            return base
        rest = [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p]
        return {**base, "PYTHONPATH": os.pathsep.join([*self.prepend, *rest])}

    def summary(self) -> str:
        """One line for the terminal: which labels run where, with which Triton."""
        where = []
        if self.environment and "python" in self.environment:
            where.append(f"interpreter {self.python}")
        if self.prepend:
            where.append(f"{', '.join(self.prepend)} first on PYTHONPATH")
        f = self.found or {}
        triton = f.get("triton") or "no triton"
        if f.get("triton_package"):
            triton += f" ({f['triton_package']}, {f.get('triton_path')})"
        labels = ", ".join(self.labels or ())
        return f"{labels}: a worker with {' and '.join(where)}: torch {f.get('torch')}, triton {triton}"


def key(environment: dict | None) -> str:
    """The environment's identity: entries that name the same one share a worker."""
    return "" if not environment else json.dumps(environment, sort_keys=True)


def resolve(value: str) -> Path:
    """`~` expanded, relative to the repository root; links kept (a venv's `python`)."""
    p = Path(value).expanduser()
    return p if p.is_absolute() else REPO_ROOT / p


def split(cases) -> list[tuple[dict | None, tuple[str, ...]]]:
    """The environments of `cases` with their labels: the harness's own first, then in case order."""
    groups: dict[str, tuple[dict | None, list[str]]] = {}
    for c in cases:
        env = c.provider.environment or None
        labels = groups.setdefault(key(env), (env, []))[1]
        if c.label not in labels:
            labels.append(c.label)
    ordered = sorted(groups.items(), key=lambda kv: kv[0] != "")  # stable: the harness's own first
    return [(env, tuple(labels)) for _, (env, labels) in ordered]


def shared(cases) -> dict | None:
    """The environment every case of `cases` runs in when it is one provider environment (a leg's worker:
    its software is not the run's, bench.sweep.runner keeps the run's in results.json `meta`), else None."""
    groups = split(cases)
    return groups[0][0] if len(groups) == 1 else None


def refuse_in_process(cases, where: str) -> None:
    """A one-line UsageError when a case's provider names an environment: `where` runs every case in one
    process (`--isolation none`, `bench.run`)."""
    for env, labels in split(cases):
        if env:
            raise UsageError(
                f"{where}: provider {labels[0]!r} names an environment ({_what(env)}): its cases run only in a "
                "worker process started with it (gdpa-bench run, --isolation process: the default then); allowed "
                f"here: the other providers (--providers without {', '.join(labels)})"
            )


def for_cases(legs: list[Leg], cases) -> list[Leg]:
    """`legs` narrowed to the labels of `cases` (a shard's), dropping those with none of them."""
    labels = {c.label for c in cases}
    out = []
    for leg in legs:
        mine = None if leg.labels is None else tuple(x for x in leg.labels if x in labels)
        if mine is None or mine:
            out.append(replace(leg, labels=mine))
    return out


def pending(legs: list[Leg], cases, done: set[str]) -> list[Leg]:
    """`legs` without those whose cases are all recorded (a resumed run starts no worker for nothing)."""
    todo = {c.label for c in cases if c.id not in done}
    left = [leg for leg in legs if leg.labels is None or todo & set(leg.labels)]
    return left or legs[:1]


def legs(cfg, cases, timeout_s: float = PROBE_TIMEOUT_S) -> list[Leg]:
    """The workers a run of `cases` needs, each environment checked and probed; one-line UsageErrors."""
    groups = split(cases)
    if len(groups) == 1 and groups[0][0] is None:
        return [Leg(None, None, sys.executable)]
    out = []
    for env, labels in groups:
        if env is None:
            out.append(Leg(None, labels, sys.executable))
            continue
        where = f"{cfg.path}: provider {labels[0]!r}: environment"
        python = sys.executable
        if "python" in env:
            p = resolve(env["python"])
            if not p.is_file() or not os.access(p, os.X_OK):
                raise UsageError(
                    f"{where}.python: {p}: {'not an executable file' if p.exists() else 'no such file'}; "
                    "allowed: a Python interpreter (e.g. a venv's bin/python)"
                )
            python = str(p)
        prepend = []
        for d in env.get("prepend_path", []):
            p = resolve(d)
            if not p.is_dir():
                raise UsageError(
                    f"{where}.prepend_path: {p}: {'not a folder' if p.exists() else 'no such folder'}; allowed: "
                    "existing site folders (e.g. pip install --target DIR)"
                )
            prepend.append(str(p))
        leg = Leg(env, labels, python, tuple(prepend))
        out.append(Leg(env, labels, python, tuple(prepend), probe(leg, where, timeout_s)))
    return out


def probe(leg: Leg, where: str, timeout_s: float) -> dict:
    """What the environment imports (`PROBE`, run by its interpreter with its PYTHONPATH), or the one-line
    UsageError of why the harness cannot run there."""
    base = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *_pythonpath()])}
    field = "python" if "python" in (leg.environment or {}) else "prepend_path"
    try:
        p = subprocess.run(
            [leg.python, "-c", PROBE],
            env=leg.env(base),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=REPO_ROOT,
        )
    except subprocess.TimeoutExpired:
        raise UsageError(
            f"{where}.{field}: importing torch there took over {timeout_s:.0f} s; allowed: an "
            "environment where `python -c 'import torch'` finishes"
        ) from None
    except OSError as exc:
        raise UsageError(f"{where}.python: {leg.python} does not start ({one_line(exc)})") from None
    if p.returncode == 0:
        try:
            return json.loads(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            pass
    last = next((x for x in reversed(p.stderr.strip().splitlines()) if x.strip()), f"exit status {p.returncode}")
    raise UsageError(
        f"{where}.{field}: the harness cannot run there: {one_line(last)} ({leg.python}"
        + (f" with {', '.join(leg.prepend)} first" if leg.prepend else "")
        + "); allowed: an interpreter with torch and the harness's requirements (python -m venv "
        "--system-site-packages VENV, or pip install -e . into it)"
    )


def _pythonpath() -> list[str]:
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def _what(env: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in env.items())


def triton_package(module) -> tuple[str | None, str | None]:
    """(`<distribution> <version>`, folder) of the Triton package imported as `module`: fbtriton installs as
    `triton`, so the distribution beside the module says which build it is."""
    folder = Path(module.__file__).parent
    for info in sorted(folder.parent.glob("*triton*.dist-info")):
        try:
            record = (info / "RECORD").read_text(errors="replace")
            meta = (info / "METADATA").read_text(errors="replace").splitlines()
        except OSError:
            continue
        if "triton/__init__.py" not in record:
            continue
        fields = dict(line.split(": ", 1) for line in meta if ": " in line)
        return f"{fields.get('Name', info.name)} {fields.get('Version', '')}".strip(), str(folder)
    return None, str(folder)


@functools.cache
def describe() -> dict:
    """This process's interpreter and the Triton it imports (the probe prints it; each case records it)."""
    out: dict = {"python": sys.executable, "triton": None, "triton_package": None, "triton_path": None}
    try:
        import triton  # noqa: PLC0415  (a provider's environment may hold another build, or none)
    except Exception as exc:  # a broken build is a fact about the environment, not an error here
        out["triton"] = f"does not import: {one_line(exc)}"
        return out
    out["triton"] = getattr(triton, "__version__", None)
    out["triton_package"], out["triton_path"] = triton_package(triton)
    return out


def record(environment: dict | None) -> dict:
    """The case record's `environment` block: the entry's environment as declared (None: the harness's own),
    the interpreter and the Triton this process ran it with."""
    return {"declared": environment or None, **describe()}
