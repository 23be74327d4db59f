"""`gdpa-bench history add|report|check`: the store, the steps of its series, the gate on them (issue 34).

A store of 12 synthetic runs over fake commits: two cases get 15% slower at commit 6, three stay as they
were; every run has run-to-run noise (1%) and noisy samples (1%). The report must name exactly that
commit for exactly those cases; the check must fail the runs after it and pass the runs before.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image as mpimg

from bench.cli.parser import main
from results.files import ResultsWriteError
from results.history_series import all_steps, change_points, with_order
from results.history_store import INDEX, HistoryError, add_run, open_store, read_run

FIX = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[1]
PNG_SIG = b"\x89PNG\r\n\x1a\n"


def _load_synth():
    spec = importlib.util.spec_from_file_location("gdpa_synth", FIX / "synth.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


synth = _load_synth()

N_RUNS, STEP_AT = 12, 6
# one commit more than runs: a run not yet in the store
COMMITS = [hashlib.sha1(f"commit {i}".encode()).hexdigest() for i in range(N_RUNS + 1)]
T0 = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.timezone.utc)
# (provider, mode, L, median ms); the first two get 15% slower from commit STEP_AT on
SPECS = [
    ("gdpa_triton", "fwd", 1024, 0.50),
    ("gdpa_triton", "bwd", 1024, 1.30),
    ("fa4", "fwd", 1024, 0.45),
    ("fa4", "bwd", 1024, 1.10),
    ("gdpa_triton", "fwd", 512, 0.20),
]
STEPPED = {"set1/fwd/L=1024/fill=1.0/gdpa_triton", "set1/bwd/L=1024/fill=1.0/gdpa_triton"}


def make_run(folder: Path, i: int, gpu: str = "NVIDIA H200", config_sha: str = "1" * 64, speed: float = 1.0) -> Path:
    rng = np.random.default_rng([i, len(gpu), int(config_sha[0], 16)])
    cases = []
    for provider, mode, L, base in SPECS:
        cid = f"set1/{mode}/L={L}/fill=1.0/{provider}"
        level = base * speed * (1.15 if cid in STEPPED and i >= STEP_AT else 1.0)
        level *= float(np.exp(0.01 * rng.standard_normal()))  # run-to-run noise
        samples = level * (1 + 0.01 * rng.standard_normal(60))
        clock = float(1980 + rng.normal(0, 5))
        case = synth.make_case(provider, mode=mode, L=L, samples=samples.tolist(), clock=clock)
        case["sm_clock_mhz"] = clock
        cases.append(case)
    meta = synth.gpu_meta(
        git_commit=COMMITS[i],
        git_sha=COMMITS[i],
        git_commit_time=(T0 + dt.timedelta(days=i)).isoformat(),
        started_at=(T0 + dt.timedelta(days=i, hours=1)).isoformat(),
        config_sha256=config_sha,
        gpu=gpu,
    )
    return synth.write_run(folder, synth.make_results(cases, meta, workloads={}))


def cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main(["history", *(str(a) for a in argv)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    root = tmp_path_factory.mktemp("history")
    runs = [make_run(root / f"run{i:02d}", i) for i in range(N_RUNS)]
    store = root / "store"
    for r in runs:
        assert add_run(store, r)[0] == "added"
    return {"root": root, "runs": runs, "store": store}


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def steps_rows(html: str) -> list[list[str]]:
    """The rows of the page's "Steps found" table, as cell texts."""
    section = re.search(r'<section id="steps-found">(.*?)</section>', html, re.S).group(1)
    body = re.search(r"<tbody>(.*?)</tbody>", section, re.S)
    return (
        [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", body.group(1))]
        if body
        else []
    )


# ---------------------------------------------------------------------------------------------- report


def test_the_report_names_exactly_the_commit_of_the_step(history, tmp_path, capsys):
    rc, out, _ = cli(capsys, "report", "--store", history["store"], "--out", tmp_path)
    assert rc == 0 and "history.html" in out
    html = (tmp_path / "history.html").read_text()
    rows = steps_rows(html)
    assert sorted(r[1] for r in rows) == sorted(STEPPED)  # no step in a control case, one per stepped case
    for r in rows:
        assert r[2].startswith(COMMITS[STEP_AT - 1][:10]) and r[3].startswith(COMMITS[STEP_AT][:10])
        assert 0.12 < float(r[4].rstrip("%")) / 100 < 0.18
    pngs = sorted((tmp_path / "plots").glob("history_*.png"))
    assert len(pngs) == 2  # panels set1/fwd/fill=1.0 and set1/bwd/fill=1.0
    for p in pngs:
        assert p.read_bytes()[:8] == PNG_SIG and float(mpimg.imread(str(p))[..., :3].mean(axis=-1).var()) > 1e-3
        assert 'src="data:image/png;base64,' in html  # embedded: the page stands alone
    assert "http://" not in html and "https://" not in html


def test_only_selects_cases_and_a_bad_regex_is_one_line(history, tmp_path, capsys):
    rc, _, _ = cli(capsys, "report", "--store", history["store"], "--out", tmp_path, "--only", "/fa4$")
    html = (tmp_path / "history.html").read_text()
    assert rc == 0 and "gdpa_triton" not in html and "fa4" in html and steps_rows(html) == []
    rc, _, err = cli(capsys, "report", "--store", history["store"], "--only", "(")
    assert rc == 2 and err.count("\n") == 1 and "--only" in err
    rc, _, err = cli(capsys, "report", "--store", history["store"], "--only", "nothing-like-this")
    assert rc == 2 and "matches no case" in err
    rc, _, err = cli(capsys, "report", "--store", history["store"], "--out", "")
    assert rc == 2 and "--out: the path is empty" in err


def test_change_points_come_from_the_series_noise_not_a_fixed_size():
    rng = np.random.default_rng(7)
    quiet, loud = 0.002 * rng.standard_normal(12), 0.05 * rng.standard_normal(12)
    step = np.r_[np.zeros(6), np.full(6, np.log(1.03))]
    assert change_points(quiet + step) == [6]  # 3% in 0.2% noise is a step
    assert change_points(loud + step) == []  # and not in 5% noise
    assert change_points(np.zeros(12)) == [] and change_points(np.zeros(3)) == []


# ----------------------------------------------------------------------------------------------- check


def test_check_fails_the_runs_on_the_step_and_passes_the_runs_before(history, capsys):
    for i, run in enumerate(history["runs"]):
        rc, out, err = cli(capsys, "check", "--store", history["store"], run)
        flagged = [line.split(": ")[1] for line in out.splitlines()]
        if i < STEP_AT:
            assert rc == 0 and flagged == [], (i, out)
        elif i == STEP_AT:
            # one slow run alone: the series cannot confirm a step yet (the baseline's compare judges it)
            assert rc == 0 and flagged == [], (i, out)
        else:
            assert rc == 1 and sorted(flagged) == sorted(STEPPED), (i, out)
            assert all(COMMITS[STEP_AT][:10] in line for line in out.splitlines())
        assert err.startswith("history check: ")


def test_check_a_run_not_yet_in_the_store(history, tmp_path, capsys):
    run = make_run(tmp_path / "next", N_RUNS)  # a commit after the last stored one, still on the step
    before = snapshot(history["store"])
    rc, out, _ = cli(capsys, "check", "--store", history["store"], run)
    assert rc == 1 and len(out.splitlines()) == len(STEPPED)
    assert snapshot(history["store"]) == before  # check only reads


# ----------------------------------------------------------------------------------------------- store


def test_adding_the_same_run_twice_is_a_no_op(history, capsys):
    before = snapshot(history["store"])
    rc, out, _ = cli(capsys, "add", history["runs"][3], "--store", history["store"])
    assert rc == 0 and out.startswith("unchanged:")
    assert snapshot(history["store"]) == before


def test_a_resumed_run_replaces_its_earlier_file(tmp_path):
    run = make_run(tmp_path / "run", 0)
    data = json.loads((run / "results.json").read_text())
    cut = dict(data, cases=data["cases"][:2])
    (run / "results.json").write_text(json.dumps(cut))
    assert add_run(tmp_path / "s", run)[0] == "added"
    (run / "results.json").write_text(json.dumps(data))  # resumed: more cases, same run
    what, entry = add_run(tmp_path / "s", run)
    assert what == "updated" and entry["cases"] == len(SPECS)
    assert [p.name for p in (tmp_path / "s" / "parquet").iterdir()] == [Path(entry["file"]).name]


def test_max_samples_thins_the_samples_but_not_the_median(tmp_path, capsys):
    run = make_run(tmp_path / "r", 0)
    rc, _, _ = cli(capsys, "add", run, "--store", tmp_path / "s", "--max-samples", "20")
    assert rc == 0
    s = open_store(tmp_path / "s")
    rows, cases = s.frame(), json.loads((run / "results.json").read_text())["cases"]
    assert s.runs[0]["max_samples"] == 20 and set(rows["times_ns"].map(len)) == {20}
    first = rows.iloc[0]
    full = np.asarray(cases[0]["times_ms"])
    assert first["median_ms"] == pytest.approx(float(np.median(full)))
    assert first["times_ns"][0] == round(full[0] * 1e6) and first["times_ns"][-1] == round(full[-1] * 1e6)
    rc, _, err = cli(capsys, "add", run, "--store", tmp_path / "t", "--max-samples", "5")
    assert rc == 2 and "at least 20" in err and not (tmp_path / "t").exists()


def test_another_gpu_or_config_is_another_series(history, tmp_path):
    store = tmp_path / "mixed"
    shutil.copytree(history["store"], store)
    for i in range(N_RUNS):  # twice as fast on a B200, and a config of another sha on the H200
        add_run(store, make_run(tmp_path / f"b200-{i}", i, gpu="NVIDIA B200", speed=0.5))
        add_run(store, make_run(tmp_path / f"cfg-{i}", i, config_sha="2" * 64, speed=0.8))
    s = open_store(store)
    assert len(s.runs) == 3 * N_RUNS
    steps = all_steps(with_order(s.frame(), s.runs))
    # each group has the step, at the same commit, for the same two cases: nothing was mixed
    assert len(steps) == 3 * len(STEPPED)
    assert set(steps["commit_after"]) == {COMMITS[STEP_AT]} and set(steps["id"]) == STEPPED
    assert steps.groupby(["config_sha256", "gpu"]).size().to_dict() == {
        ("1" * 64, "NVIDIA B200"): 2,
        ("1" * 64, "NVIDIA H200"): 2,
        ("2" * 64, "NVIDIA H200"): 2,
    }


def test_a_run_without_a_config_sha_gets_one_derived_from_its_config(tmp_path):
    run = make_run(tmp_path / "r", 0)
    data = json.loads((run / "results.json").read_text())
    del data["meta"]["config_sha256"]
    (run / "results.json").write_text(json.dumps(data))
    entry, _ = read_run(run)
    assert entry["config_sha_source"].startswith("derived") and re.fullmatch(r"[0-9a-f]{64}", entry["config_sha256"])
    assert read_run(run)[0]["config_sha256"] == entry["config_sha256"]  # deterministic
    data["meta"]["timing"] = {"rep_ms": 300}
    (run / "results.json").write_text(json.dumps(data))
    assert read_run(run)[0]["config_sha256"] != entry["config_sha256"]


def test_a_failed_index_write_leaves_the_store_as_it_was(history, tmp_path, monkeypatch):
    store = tmp_path / "s"
    shutil.copytree(history["store"], store)
    before = snapshot(store)

    import results.history_store as history_store

    real, written = history_store.atomic_write, []

    def refuse(path, data):  # the run's Parquet file is written first, through the same function
        if Path(path).name != INDEX:
            written.append(path)
            return real(path, data)
        raise ResultsWriteError(f"{path}: cannot write (No space left on device, ENOSPC)")

    monkeypatch.setattr(history_store, "atomic_write", refuse)
    with pytest.raises(ResultsWriteError):
        add_run(store, make_run(tmp_path / "new", N_RUNS))
    assert len(written) == 1  # the index failed after the new run's file stood: that file is removed again
    assert snapshot(store) == before


# ------------------------------------------------------------------------------------------ bad input


def _corrupt_parquet(store: Path) -> None:
    f = next((store / "parquet").glob("*.parquet"))
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _flip_a_byte(store: Path) -> None:  # same size, different bytes: the index's sha256 catches it
    f = next((store / "parquet").glob("*.parquet"))
    raw = bytearray(f.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    f.write_bytes(bytes(raw))


BAD_STORES = {
    "index not JSON": (lambda s: (s / INDEX).write_text("{not json"), "not valid JSON"),
    "index of another schema": (lambda s: (s / INDEX).write_text('{"schema": "x/1", "runs": []}'), "schema"),
    "an entry naming a path outside": (
        lambda s: (s / INDEX).write_text(
            (s / INDEX).read_text().replace('"file": "parquet/', '"file": "../parquet/', 1)
        ),
        "file:",
    ),
    "a truncated Parquet file": (_corrupt_parquet, "corrupt"),
    "a Parquet file with a flipped byte": (_flip_a_byte, "corrupt"),
    "a run file missing": (lambda s: next((s / "parquet").glob("*.parquet")).unlink(), "no such file"),
}


@pytest.mark.parametrize("name", list(BAD_STORES))
@pytest.mark.parametrize("command", ["add", "report", "check"])
def test_a_corrupt_store_is_one_line_exit_2_and_unchanged(history, tmp_path, capsys, name, command):
    store = tmp_path / "s"
    shutil.copytree(history["store"], store)
    spoil, said = BAD_STORES[name]
    spoil(store)
    before = snapshot(store)
    rc, out, err = cli(capsys, *_argv(command, store, make_run(tmp_path / "new", N_RUNS)))
    assert rc == 2 and out == "" and err.count("\n") == 1 and said in err, err
    assert snapshot(store) == before


def _argv(command: str, store: Path, run: Path) -> list:
    return {"add": ["add", run, "--store", store], "report": ["report", "--store", store]}.get(
        command, ["check", "--store", store, run]
    )


@pytest.mark.parametrize("command", ["add", "report", "check"])
def test_a_folder_that_is_not_a_store_is_refused(tmp_path, capsys, command):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    run = make_run(tmp_path / "r", 0)
    rc, _, err = cli(capsys, *_argv(command, other, run))
    assert rc == 2 and "not a history store" in err and err.count("\n") == 1
    assert snapshot(other) == {"notes.txt": b"mine"}
    a_file = tmp_path / "file"
    a_file.write_text("x")
    rc, _, err = cli(capsys, *_argv(command, a_file, run))
    assert rc == 2 and "is a file" in err and a_file.read_text() == "x"


def test_a_run_folder_without_results_or_commit_is_refused(history, tmp_path, capsys):
    store = tmp_path / "s"
    shutil.copytree(history["store"], store)
    before = snapshot(store)
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, _, err = cli(capsys, "add", empty, "--store", store)
    assert rc == 2 and "no results.json" in err and err.count("\n") == 1
    rc, _, err = cli(capsys, "check", "--store", store, empty)
    assert rc == 2 and "no results.json" in err
    run = make_run(tmp_path / "nogit", 0)
    data = json.loads((run / "results.json").read_text())
    data["meta"].update(git_commit=None, git_sha=None)
    (run / "results.json").write_text(json.dumps(data))
    rc, _, err = cli(capsys, "add", run, "--store", store)
    assert rc == 2 and "git_commit" in err
    broken = make_run(tmp_path / "broken", 0)
    data = json.loads((broken / "results.json").read_text())
    data["cases"][0]["times_ms"] = [-1.0]
    (broken / "results.json").write_text(json.dumps(data))
    rc, _, err = cli(capsys, "add", broken, "--store", store)
    assert rc == 2 and "times_ms" in err
    data["cases"] = []
    (broken / "results.json").write_text(json.dumps(data))
    rc, _, err = cli(capsys, "add", broken, "--store", store)
    assert rc == 2 and "none recorded" in err
    assert snapshot(store) == before
    rc, _, err = cli(capsys, "report", "--store", tmp_path / "nothing-here")
    assert rc == 2 and "no history store" in err
    with pytest.raises(HistoryError):
        open_store(tmp_path / "nothing-here")


def test_help_lists_the_command():
    p = subprocess.run(["python", "-m", "bench", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "history" in p.stdout


# ------------------------------------------------------------------------------------ headless Chromium


def test_chromium_screenshot_of_history(history, tmp_path, capsys):
    exe = shutil.which("chromium")
    if exe is None:
        if os.environ.get("GDPA_REQUIRE_CHROMIUM"):
            pytest.fail("GDPA_REQUIRE_CHROMIUM is set but `chromium` is not on PATH (apt-get install -y chromium)")
        pytest.skip("chromium not installed (set GDPA_REQUIRE_CHROMIUM=1 to make this a failure)")
    rc, _, _ = cli(capsys, "report", "--store", history["store"], "--out", tmp_path)
    assert rc == 0
    shot = tmp_path / "shot.png"
    cmd = [
        exe,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={shot}",
        "--window-size=1400,2000",
        (tmp_path / "history.html").resolve().as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert shot.exists(), f"chromium wrote no screenshot (rc {proc.returncode}): {proc.stderr[-2000:]}"
    assert shot.read_bytes()[:8] == PNG_SIG
    img = mpimg.imread(str(shot))
    assert img.shape[0] == 2000 and img.shape[1] == 1400
    gray = img[..., :3].mean(axis=-1)
    assert float(gray.var()) > 5e-3, "screenshot looks blank"
    assert (gray < 0.5).mean() > 0.005  # text and plot lines are drawn


# -------------------------------------------------------------------------------- the committed example


def test_the_committed_example_history_holds_the_h200_runs():
    """The three committed example runs, and the runs they replaced: production 2026-12-01 at c342903,
    2026-12-02 at 1a238a1 and at e0f4875, 2026-12-03 at fcd901e, df8f6ae and 1a75745 (replaced in docs/ by the
    run of 2026-12-04 at f50d6fb, the configs' own 1 s windows); peers 2026-12-01 at c342903 (replaced by the
    run of 2026-12-04 at fff8d14): a history across commits."""
    store = open_store(ROOT / "docs" / "example-history")
    ids = {
        read_run(ROOT / "docs" / d)[0]["run_id"]
        for d in ("example-h200", "example-h200-production", "example-h200-peers")
    }
    assert ids <= {e["run_id"] for e in store.runs}
    names = sorted(e["config_name"] for e in store.runs)
    assert names == ["h200"] + ["peers-h200"] * 2 + ["production"] * 7
    assert len(store.frame()) == sum(e["cases"] for e in store.runs)  # every file matches its checksum
    assert (ROOT / "docs" / "example-history" / "history.html").exists()


def test_the_workflow_appends_checks_and_publishes_the_history():
    import yaml

    steps = yaml.safe_load((ROOT / ".github" / "workflows" / "perf-regression.yml").read_text())["jobs"]["perf"][
        "steps"
    ]
    runs = " ".join(str(s.get("run", "")) for s in steps)
    for command in ("history add runs/ci --store runs/history", "history check --store runs/history runs/ci"):
        assert command in runs
    assert "history report --store runs/history" in runs
    uploads = [s["with"] for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert any(u["name"] == "perf-history" and u["path"].strip() == "runs/history" for u in uploads)
    assert any("runs/history-report" in u["path"] for u in uploads)  # history.html
    restores = [s["with"] for s in steps if str(s.get("uses", "")).startswith("actions/download-artifact")]
    assert restores and restores[0]["name"] == "perf-history"
