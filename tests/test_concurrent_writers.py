"""One writer per run folder (bench.sweep.runlock, issue 25): two runs with the same --out, two --resume of one
run, or a --resume while a run writes — one of the two is refused with one line naming the holder (or a
resume that came after the run finished runs nothing), and the
folder's results.json holds every case exactly once, whatever the timing (20 trials as real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from bench.cli.parser import main
from bench.sweep.runlock import LOCK_FILE, run_folder_lock

ROOT = Path(__file__).resolve().parents[1]
TRIALS = 20
EXPECTED = {f"s/fwd/L={L}/naive_eager" for L in (4, 8, 16)}  # tests/run_folder_race.py's config
KINDS = ("run+run", "resume+resume", "run+resume")  # tests/run_folder_race.py's trials, in turn


@pytest.mark.parametrize(
    ("isolation", "n"),
    [(None, TRIALS), ("process", 6)],  # process: each writer's sweep in a worker that inherits its lock
    ids=["in-process", "worker-process"],
)
def test_two_writers_never_lose_or_duplicate_a_case(tmp_path, isolation, n):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, str(ROOT / "tests" / "run_folder_race.py"), str(tmp_path), str(n)]
    p = subprocess.run(cmd + ([isolation] if isolation else []), capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    trials = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(trials) == n
    refusals = Counter()
    for t in trials:
        for err in t["stderr"]:
            assert "Traceback" not in err, err
        if t["kind"] == "run+resume" and t["codes"] == [0, 0]:
            # the run finished before the resume took the folder (a starved CPU): the resume ran nothing
            assert f"resuming: {len(EXPECTED)} of {len(EXPECTED)} cases already recorded" in t["stdout"][1], t
            assert "(0 run now" in t["stdout"][1], t
            refusals["found a finished run"] += 1
        else:
            assert sorted(t["codes"]) == [0, 2], t  # exactly one writer refused, the other done
            lines = t["stderr"][t["codes"].index(2)].strip().splitlines()
            assert len(lines) == 1, lines
            if "another gdpa-bench is writing this run folder (pid " in lines[0]:
                refusals["named the holder"] += 1
            else:  # the first writer had finished before the second looked: the folder holds a run
                assert "already holds a run" in lines[0], lines
                refusals["found a finished run"] += 1
        run = Path(t["run"])
        cases = json.loads((run / "results.json").read_text())["cases"]
        ids = [c["id"] for c in cases]
        assert len(ids) == len(set(ids)) and set(ids) == EXPECTED, ids  # nothing lost, nothing twice
        assert all(c["status"] == "ok" for c in cases)
        assert not [f.name for f in run.iterdir() if f.name.endswith(".tmp")]  # no temp file left behind
        if t["before"]:  # a resume kept the cases recorded before it: the same samples, not timed again
            kept = {c["id"]: c["times_ms"] for c in cases}
            assert all(kept[c["id"]] == c["times_ms"] for c in t["before"])
    assert Counter(t["kind"] for t in trials) == Counter(KINDS[k % len(KINDS)] for k in range(n))
    assert refusals["named the holder"] >= n // 2, refusals


def test_a_held_folder_is_refused_with_the_holder_named(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(_config())
    out = tmp_path / "run"
    with run_folder_lock(out, "--out"):
        assert main(["run", str(cfg), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"(pid {os.getpid()} on " in err[0] and str(out) in err[0], err
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]  # the refused writer wrote nothing
    # once the holder is gone the folder is free (the kernel dropped the lock; the file itself stays)
    assert main(["run", str(cfg), "--out", str(out), "--no-progress", "--no-report"]) == 0


def _config() -> str:
    import yaml

    sys.path.insert(0, str(ROOT / "tests"))
    from run_folder_race import CONFIG

    return yaml.safe_dump(dict(CONFIG, sets=[dict(CONFIG["sets"][0], max_len=4)]))
