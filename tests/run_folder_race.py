"""Two writers racing for one run folder, as real processes: the driver of tests/test_concurrent_writers.py.

    python tests/run_folder_race.py WORKDIR TRIALS [ISOLATION]   -> one JSON line: every trial's kind, exit
                                                                   codes, stderr

The driver imports the CLI once (the torch import is most of a process start) and forks two children per
trial that wait on one pipe and are released together, so they reach the run folder within milliseconds
of each other; each runs `bench.cli.parser.main(argv)` with stdout/stderr in its own file and exits with its
code. The driver itself runs no torch op before forking (no OpenMP pool to inherit). With ISOLATION
(`process`) every writer runs `--isolation process`: the sweep in a worker process that inherits its
parent's lock (bench.shard.worker). Trial kinds, in turn:

- `run+run`: two new runs with the same --out;
- `resume+resume`: two --resume of a run that recorded half its cases;
- `run+resume`: a --resume started while a run writes the folder (after its first case is on disk).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow.parquet  # noqa: E402, F401  (loaded once here, not in every child: results.parquet)

import bench.sweep.runner  # noqa: E402, F401  (the sweep's modules, loaded once)
from bench.cli.parser import main  # noqa: E402  (after the path: the checkout under test)

CONFIG = {
    "name": "race",
    "device": "cpu",
    "providers": ["naive_eager"],
    "modes": ["fwd"],
    # long enough (~0.5 s of samples) that the second writer always arrives while the first holds the lock
    "timing": {"warmup_ms": 1, "rep_ms": 60, "min_reps": 3, "max_reps": 50},
    "correctness": {"max_check_seqs": 2},
    "power": {"enabled": False},
    "hardware": {"calibrate": False},
    "sets": [
        {
            "name": "s",
            "B": 2,
            "H": 1,
            "D": 8,
            "dtype": "fp32",
            "max_len": [4, 8, 16],
            "lengths": {"fill": 1.0, "family": "uniform_fill"},
        }
    ],
}
KINDS = ("run+run", "resume+resume", "run+resume")


def spawn(argv: list[str], log: Path, gate: int | None) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:
        if gate is not None:
            os.read(gate, 1)  # released together with the other writer
        for name, target in ((log, 1), (log.with_suffix(".err"), 2)):
            os.dup2(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), target)
        rc = main(argv)
    except BaseException:  # a crash of the child is the test's failure: code 99 and the traceback in .err
        import traceback

        traceback.print_exc()
        rc = 99
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


def wait(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def trial(work: Path, k: int, isolation: str | None = None) -> dict:
    kind = KINDS[k % len(KINDS)]
    folder = work / f"t{k}"
    folder.mkdir()
    cfg = folder / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    out = folder / "run"
    base = ["run", str(cfg), "--no-progress", "--no-report", *(["--isolation", isolation] if isolation else [])]
    first = [*base, "--out", str(out)]
    second = [*base, "--out", str(out)] if kind == "run+run" else [*base, "--resume", str(out)]
    before = None
    if kind == "resume+resume":  # a run that recorded half its cases
        assert wait(spawn([*first, "--only", "L=4/"], folder / "setup.out", None)) == 0
        before = json.loads((out / "results.json").read_text())["cases"]
        first = [*base, "--resume", str(out)]
    r, w = os.pipe()
    pids = [spawn(first, folder / "a.out", r)]
    if kind == "run+resume":  # the resume comes once the run has written its first case
        os.write(w, b"x")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if json.loads((out / "results.json").read_text())["cases"]:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.01)
        pids.append(spawn(second, folder / "b.out", None))
    else:
        pids.append(spawn(second, folder / "b.out", r))
        os.write(w, b"xx")
    codes = [wait(p) for p in pids]
    return {
        "kind": kind,
        "codes": codes,
        "stderr": [(folder / f"{x}.err").read_text() for x in ("a", "b")],
        "stdout": [(folder / f"{x}.out").read_text() for x in ("a", "b")],
        "run": str(out),
        "before": before,
    }


def trials(work: Path, n: int, at_once: int = 2, isolation: str | None = None) -> list[dict]:
    """`n` trials, `at_once` of them side by side (each in its own folder, each its own forked process)."""
    out = []
    for start in range(0, n, at_once):
        pids = {}
        for k in range(start, min(n, start + at_once)):
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    (work / f"t{k}.json").write_text(json.dumps(trial(work, k, isolation)))
                except BaseException as exc:
                    (work / f"t{k}.json").write_text(json.dumps({"kind": "error", "error": repr(exc)}))
                    code = 1
                os._exit(code)
            pids[k] = pid
        for k, pid in pids.items():
            wait(pid)
            out.append(json.loads((work / f"t{k}.json").read_text()))
    return out


if __name__ == "__main__":
    import gc

    gc.freeze()  # the imported modules' objects: children's gc.collect() skips them (no copy-on-write storm)
    work, n = Path(sys.argv[1]), int(sys.argv[2])
    print(json.dumps(trials(work, n, isolation=sys.argv[3] if len(sys.argv) > 3 else None)))
