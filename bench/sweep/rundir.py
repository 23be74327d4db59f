"""Where a run is written, checked before anything runs: a run is never overwritten, mixed with a run of
another config, or written outside the place the user named (docs/DESIGN.md §7).

- a new run (`--out DIR`, or `<output_dir>/<name>-<UTC time>`): the folder must not already hold a run
  (`results.json` or a multi-GPU plan: that is what `--resume` is for), must not be or sit under a file,
  and its nearest existing folder must be writable;
- `--resume DIR`: DIR must hold a readable results.json of schema `gdpa-bench/1` made from the same
  config (name and sha256 of the file), unless `--force`; with `--retry-failed` its failed cases run again
  (`retry_failed`).

Every refusal is a one-line `UsageError`.
"""

from __future__ import annotations

import os
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

from bench.config.models import LoadedConfig
from bench.errors import CLI, Spelling, UsageError
from results.files import ResultsError, ResultsWriter, read_results
from support.inputs import InputError, check_path_text

PLAN_FILE = "multigpu.json"  # the plan of a sharded run (bench.shard.plan)


def holds_run(path: Path) -> bool:
    return (path / "results.json").exists() or (path / PLAN_FILE).exists()


def folder_option(value, option: str) -> Path:
    """The folder a command-line option or API argument names, after the checks every path gets (not
    empty: `--out ''` was the current folder; no NUL; names within NAME_MAX, the whole within PATH_MAX)."""
    try:
        return Path(check_path_text(value, option))
    except InputError as exc:
        raise UsageError(str(exc)) from None


def check_writable_folder(path: Path, where: str) -> None:
    """`path` is, or can be made, a folder this process can write into (one-line UsageError)."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{where}: is a file; allowed: a folder")
    existing = path
    while not existing.exists():
        parent = existing.parent
        if parent == existing:
            break
        existing = parent
    if existing.exists() and not existing.is_dir():
        raise UsageError(f"{where}: {existing} is a file, so no folder can be made under it")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{where}: {existing} is not writable (read-only or no permission)")


def check_new_run_dir(path: Path, option: str, spelling: Spelling = CLI, resume: bool = True) -> None:
    """A new run may be written to `path`; `option` names where the path came from (`--out`, `out=`, or
    the config's `output_dir`) in the one-line error, `spelling` how to name `--resume` in it (`resume`
    False: the command has none, as `submit`)."""
    path = folder_option(path, option)
    where = f"{option}{path!s}" if option.endswith("=") else f"{option} {path}"
    if path.exists() and not path.is_dir():
        raise UsageError(f"{where}: is a file; allowed: a new folder, or an empty one")
    if path.is_dir() and holds_run(path):
        how = f"continue it with {spelling.arg('resume', str(path))}, or " if resume else ""
        raise UsageError(f"{where}: already holds a run; {how}choose another folder")
    check_writable_folder(path, where)


def check_resume(cfg: LoadedConfig, run_dir: Path, force: bool = False, spelling: Spelling = CLI) -> dict:
    """The results of the run `--resume run_dir` continues; refuses a run of another config unless
    `force`. Errors name the options as `spelling` does (`--resume DIR`, or bench.run's `resume='DIR'`)."""
    run_dir = folder_option(run_dir, spelling.name("resume"))
    where = spelling.arg("resume", str(run_dir))
    if not run_dir.is_dir():
        raise UsageError(f"{where}: " + ("is a file; allowed: a run folder" if run_dir.exists() else "no such folder"))
    if not (run_dir / "results.json").exists():
        raise UsageError(f"{where}: no results.json there")
    try:
        data = read_results(run_dir)
    except ResultsError as exc:
        raise UsageError(f"{where}: {exc}") from None
    meta = data["meta"]
    theirs = (meta.get("config_name"), meta.get("config_sha256"))
    if not force and theirs != (cfg.name, cfg.sha256):
        sha = str(theirs[1] or "none")[:12]
        raise UsageError(
            f"{where}: that run was made from config {theirs[0]!r} ({meta.get('config')}, "
            f"sha256 {sha}), not {cfg.name!r} ({cfg.path}, sha256 {cfg.sha256[:12]}); resuming would mix two "
            f"configs in one run: pass {spelling.arg('force')} to continue it anyway"
        )
    if not force and (changed := _lengths_changed(cfg, data.get("workloads") or {})) is not None:
        raise UsageError(
            f"{where}: workload {changed}: its lengths differ from the run's (a lengths file changed, or the code "
            f"that draws them); resuming would mix two batches in one workload: pass {spelling.arg('force')} to "
            "continue it anyway"
        )
    if not os.access(run_dir, os.W_OK | os.X_OK):
        raise UsageError(f"{where}: the folder is not writable (read-only or no permission)")
    return data


def _lengths_changed(cfg: LoadedConfig, recorded: dict) -> str | None:
    """The first workload of the config whose lengths the run recorded differently (the config's sha covers
    its own text, not an empirical lengths file it names), else None."""
    seen = set()
    for case in cfg.cases:
        w = case.workload
        old = recorded.get(w.name)
        if w.name in seen or not isinstance(old, dict) or old.get("q_lengths") is None:
            continue
        seen.add(w.name)
        q, k = w.lengths()
        if list(map(int, q)) != old["q_lengths"] or list(map(int, k)) != old.get("kv_lengths", old["q_lengths"]):
            return w.name
    return None


def resume_command(argv: list[str], run_dir: Path) -> str:
    """The command that continues an interrupted run: the same arguments, `--out` dropped, `--resume
    RUN_DIR` added (the parser takes no abbreviations, so this finds every --out/--resume)."""
    args, skip = [], False
    for x in argv:
        if skip:
            skip = False
            continue
        if x in ("--out", "--resume"):
            skip = True
            continue
        if x.startswith(("--out=", "--resume=")):
            continue
        args.append(x)
    prog = "gdpa-bench" if Path(sys.argv[0]).name == "gdpa-bench" else "python -m bench"
    return f"{prog} {shlex.join([*args, '--resume', str(run_dir)])}"


def retry_failed(run_dir: Path, selected: set[str] | None = None) -> list[str]:
    """`run --resume RUN_DIR --retry-failed`: the cases results.json records `failed` leave its `cases` for
    `meta.retried` (each record whole, with `retried_at`), so the resumed run measures them again; nothing
    else in the run changes, and a retry interrupted before they ran again leaves them to the next `--resume`
    (recorded nowhere as done). `selected`: the ids this resume runs (`--only`, `--providers`); a failed case
    outside them keeps its record, since nothing would measure it again. Returns the ids moved. Call it
    holding the folder's lock."""
    data = read_results(run_dir)

    def again(case: dict) -> bool:
        return case.get("status") == "failed" and (selected is None or case.get("id") in selected)

    failed = [c for c in data.get("cases", []) if again(c)]
    if failed:
        when = datetime.now(timezone.utc).isoformat(timespec="seconds")
        meta = data.setdefault("meta", {})
        meta["retried"] = [*meta.get("retried", []), *({**c, "retried_at": when} for c in failed)]
        data["cases"] = [c for c in data["cases"] if not again(c)]
        writer = ResultsWriter.of(Path(run_dir), data)
        if writer.run_dir.joinpath("results.parquet").exists():  # the three files hold the same cases
            writer.write_parquet()
    return [c["id"] for c in failed]
