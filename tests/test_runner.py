"""The runner end to end on CPU: statuses, faults, interruption, resume, results files."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from bench.case.gate import check_sequences
from bench.cli.parser import main
from bench.config.models import load_config
from kernels.registry import Provider, register
from results.files import SAMPLE_DIGITS

ROOT = Path(__file__).resolve().parents[1]


@register
class _Boom(Provider):
    name = "test_boom"
    semantics = "gdpa"

    def forward(self, batch, spec):
        raise RuntimeError("kernel exploded\nsecond line that must not appear")


@register
class _OOM(Provider):
    name = "test_oom"
    semantics = "gdpa"

    def forward(self, batch, spec):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")


@register
class _Wrong(Provider):
    name = "test_wrong"
    semantics = "gdpa"

    def forward(self, batch, spec):
        return torch.zeros_like(batch.q) + 0.0 * (batch.q.sum() + batch.k.sum() + batch.v.sum())


@register
class _Picky(Provider):
    name = "test_picky"
    semantics = "gdpa"

    def unsupported(self, batch, spec):
        return "needs head_dim 128"


def config(tmp_path, providers, modes="[fwd, bwd]", extra=""):
    p = tmp_path / "cfg.yaml"
    p.write_text(
        textwrap.dedent(f"""
        name: t
        device: cpu
        providers: {providers}
        modes: {modes}
        timing: {{warmup_ms: 1, rep_ms: 2, min_reps: 2, max_reps: 2}}
        power: {{enabled: false}}
        hardware: {{calibrate: false}}
        {extra}
        sets:
          - name: s
            B: 3
            H: 2
            D: 16
            dtype: fp32
            activation: silu
            max_len: [6, 9]
            lengths: {{family: uniform_fill, fill: 0.5}}
            kv: {{rule: self}}
        """)
    )
    return p


def results(run_dir):
    return json.loads((Path(run_dir) / "results.json").read_text())


def test_statuses_and_sweep_goes_on(tmp_path, capsys):
    cfg = config(tmp_path, "[test_boom, test_oom, test_wrong, test_picky, naive_eager, reference]")
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--no-progress"]) == 0
    data = results(out)
    assert data["schema"] == "gdpa-bench/1"
    by = {}
    for c in data["cases"]:
        by.setdefault(c["provider"], set()).add(c["status"])
    assert by == {
        "test_boom": {"failed"},
        "test_oom": {"failed"},
        "test_wrong": {"incorrect"},
        "test_picky": {"skipped"},
        "naive_eager": {"ok"},
        "reference": {"ok"},
    }
    assert len(data["cases"]) == 6 * 2 * 2  # providers x modes x max lengths: nothing lost
    boom = next(c for c in data["cases"] if c["provider"] == "test_boom")
    assert boom["error"] == "RuntimeError: kernel exploded" and boom["times_ms"] == []
    oom = next(c for c in data["cases"] if c["provider"] == "test_oom")
    assert oom["error"].startswith("out of memory")
    wrong = next(c for c in data["cases"] if c["provider"] == "test_wrong")
    assert wrong["correctness"]["passed"] is False and wrong["median_ms"] is None
    picky = next(c for c in data["cases"] if c["provider"] == "test_picky")
    assert picky["error"] == "needs head_dim 128"
    ok = next(c for c in data["cases"] if c["provider"] == "naive_eager" and c["mode"] == "bwd")
    assert ok["correctness"]["passed"] and set(ok["correctness"]["per_tensor"]) == {"out", "dq", "dk", "dv"}
    assert len(ok["times_ms"]) >= 2 and ok["p20_ms"] <= ok["median_ms"] <= ok["p80_ms"]
    assert ok["flops"] == pytest.approx(
        load_config(cfg)
        .cases[0]
        .workload.flops(
            "bwd",
            (
                np.array(data["workloads"][ok["workload"]["name"]]["q_lengths"]),
                np.array(data["workloads"][ok["workload"]["name"]]["kv_lengths"]),
            ),
        )
    )
    assert ok["power"] is None and data["meta"]["monitor"]["unavailable_reason"] == "no GPU (CPU run)"
    csv = pd.read_csv(out / "results.csv")
    assert len(csv) == len(data["cases"]) and "correctness.rel_err" in csv.columns
    assert (out / "report.md").exists() and (out / "report.html").exists()


def test_unavailable_provider_is_skipped_with_reason(tmp_path):
    cfg = config(tmp_path, "[fa4, naive_eager]", modes="[fwd]")
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--no-progress"]) == 0
    fa4 = [c for c in results(out)["cases"] if c["provider"] == "fa4"]
    assert fa4 and all(c["status"] == "skipped" and c["error"] for c in fa4)


def test_resume_only_runs_missing_cases(tmp_path):
    cfg = config(tmp_path, "[naive_eager, reference]", modes="[fwd]")
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--only", "L=6", "--no-progress"]) == 0
    first = results(out)["cases"]
    assert {c["max_len"] for c in first} == {6}
    assert main(["run", str(cfg), "--resume", str(out), "--no-progress"]) == 0
    cases = results(out)["cases"]
    assert len(cases) == 4 and len({c["id"] for c in cases}) == 4
    assert [c for c in cases if c["max_len"] == 6] == first  # finished cases untouched
    # the same machine and code: one session, no case says otherwise
    assert "sessions" not in results(out)["meta"] and not any("session" in c for c in cases)


def test_a_run_resumed_at_another_commit_says_which_session_measured_each_case(tmp_path, monkeypatch, capsys):
    import bench.sweep.env as envmod
    from reports.environment import environment_table

    cfg = config(tmp_path, "[naive_eager, reference]", modes="[fwd]")
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--only", "L=6", "--no-progress"]) == 0
    before = results(out)["meta"]
    git = envmod.git_state()
    monkeypatch.setattr(envmod, "git_state", lambda: {**git, "git_sha": "f00ba4", "git_commit": "f00ba4"})
    assert main(["run", str(cfg), "--resume", str(out), "--no-progress"]) == 0
    data = results(out)
    runs = data["meta"]["sessions"]
    assert [r["git_sha"] for r in runs] == [before["git_sha"], "f00ba4"]
    assert runs[0]["started_at"] == before["started_at"] and data["meta"]["git_sha"] == "f00ba4"
    old = [c for c in data["cases"] if c["max_len"] == 6]
    new = [c for c in data["cases"] if c["max_len"] != 6]
    assert old and new and not any("session" in c for c in old) and {c["session"] for c in new} == {1}
    assert "session" in pd.read_csv(out / "results.csv").columns

    rows = dict(environment_table(data["meta"], None).rows)
    assert (
        "f00ba4" in rows["sessions (resumed on another machine or commit)"]
        and "commits differ" in rows["sessions (resumed on another machine or commit)"]
    )
    # a history orders runs by commit: a run of two commits is refused in one line
    capsys.readouterr()
    assert main(["history", "add", str(out), "--store", str(tmp_path / "history")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "measured at 2 commits" in err[0] and "f00ba4" in err[0]


SLOW = """
import time
from kernels.registry import Provider, register
from kernels.naive import naive_gdpa

@register
class Slow(Provider):
    name = "test_slow"
    semantics = "gdpa"

    def forward(self, batch, spec):
        time.sleep(0.3)
        return naive_gdpa(batch.q, batch.k, batch.v, batch.q_offsets, batch.kv_offsets, batch.max_q,
                          batch.max_kv, spec.activation, spec.alpha, spec.qk_scale, spec.causal)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_interrupted_run_keeps_finished_cases(tmp_path, sig):
    (tmp_path / "slowprov.py").write_text(SLOW)
    cfg = config(tmp_path, "[test_slow]", modes="[fwd, bwd, fwd_bwd]")
    out_dir = tmp_path / "run"
    env = dict(
        os.environ,
        GDPA_BENCH_PROVIDERS="slowprov",
        PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", "run", str(cfg), "--out", str(out_dir), "--no-progress"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if len(results(out_dir)["cases"]) >= 2:
                break
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            pass
        time.sleep(0.1)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    data = results(out_dir)  # valid JSON whatever the signal
    n = len(data["cases"])
    assert 2 <= n < 6
    assert all(c["status"] == "ok" for c in data["cases"])
    if sig != signal.SIGKILL:
        assert proc.returncode == 128 + sig  # 130 for SIGINT, 143 for SIGTERM, as a shell reports them
        assert data["meta"]["interrupted"] is True and data["meta"]["finished_at"]
        assert "Traceback" not in err
        last = out.strip().splitlines()[-1]  # the run ends with the command that continues it
        assert last == f"to continue: python -m bench run {cfg} --no-progress --resume {out_dir}", last


def test_check_sequences_covers_extremes():
    q = np.array([5, 0, 9, 3, 7, 1, 2, 8])
    kv = np.array([5, 4, 9, 3, 7, 1, 2, 8])
    seqs = check_sequences(q, kv, 4, seed=0)
    assert len(seqs) == 4 and 2 in seqs and 1 in seqs  # longest and the empty one
    assert check_sequences(q, kv, 4, seed=0) == seqs
    assert check_sequences(q[:3], kv[:3], 16, seed=0) == [0, 1, 2]


def test_flops_follow_the_peer_convention():
    cfg = load_config(ROOT / "configs" / "h200.yaml")
    w = next(c.workload for c in cfg.cases if c.workload.name == "set1/L=1024/fill=1.0")
    q = np.full(1152, 1024)
    fwd = w.flops("fwd", (q, q))
    assert fwd == 4 * 4 * 128 * 1152 * 1024 * 1024
    assert w.flops("bwd", (q, q)) == 2.5 * fwd and w.flops("fwd_bwd", (q, q)) == 3.5 * fwd


def test_causal_flops_count_each_providers_mask(tmp_path):
    """Causal with Lq != Lk: GDPA's mask is top-left aligned, softmax attention's bottom-right (FlashAttention's),
    so the two compute different pairs; each record's FLOPs are its own provider's (a softmax kernel's were
    counted top-left: 62x too few at Lq 16, Lk 1024)."""
    cfg = tmp_path / "causal.yaml"
    cfg.write_text(
        textwrap.dedent(
            """
            name: causal-flops
            device: cpu
            providers: [reference, reference_softmax]
            modes: [fwd]
            timing: {warmup_ms: 1, rep_ms: 2, min_reps: 2, max_reps: 2}
            power: {enabled: false}
            hardware: {calibrate: false}
            sets:
              - {name: t, B: 3, H: 2, D: 16, dtype: fp32, max_len: 24, causal: true,
                 lengths: {family: uniform_fill, fill: 1.0}, kv: {rule: fixed_kv, kv_len: 7}}
            """
        )
    )
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--no-progress", "--no-report"]) == 0
    cases = {c["provider"]: c for c in json.loads((out / "results.json").read_text())["cases"]}
    assert {c["status"] for c in cases.values()} == {"ok"}
    (case,) = [c for c in load_config(cfg).cases if c.label == "reference"]
    q, kv = case.workload.lengths()
    assert set(q) == {24} and set(kv) == {7}
    i, j = np.arange(24)[:, None], np.arange(7)[None, :]
    top_left, bottom_right = int((j <= i).sum()), int((j <= i + 7 - 24).sum())
    assert (top_left, bottom_right) == (28 + 17 * 7, 28)  # bottom-right: the first 17 rows see no key, then 1..7
    for label, pairs in (("reference", top_left), ("reference_softmax", bottom_right)):
        assert cases[label]["flops"] == 4 * 2 * 16 * 3 * pairs, label


def test_smoke_config_pipeline_subset(tmp_path):
    """The README's main job on CPU, restricted to one workload to keep the suite fast."""
    out = tmp_path / "smoke"
    assert (
        main(
            [
                "run",
                str(ROOT / "configs" / "smoke.yaml"),
                "--out",
                str(out),
                "--no-progress",
                "--only",
                "tiny/.*/L=24/fill=1.0/",
            ]
        )
        == 0
    )
    data = results(out)
    assert {c["provider"] for c in data["cases"]} == {"gdpa_triton", "naive_eager", "reference"}
    assert all(c["status"] == "ok" for c in data["cases"]), [c["error"] for c in data["cases"]]
    configs = {c["mode"]: c["kernel_config"] for c in data["cases"] if c["provider"] == "gdpa_triton"}
    bwd_kernels = json.dumps(configs["bwd"]).lower()  # what ran: the forward and both backward kernels
    assert all(k in bwd_kernels for k in ("fwd", "dkdv", "dq")), configs["bwd"]
    assert all(c["kernel_config"] is None for c in data["cases"] if c["provider"] != "gdpa_triton")


class _OrderMonitor:
    """Stands in for the NVML monitor: records when the energy loop runs relative to the samples."""

    available = True

    def __init__(self, events):
        self.events = events

    def measure(self, fn, sync, min_seconds, settle_s, flops_per_call, case_id):
        fn()
        self.events.append("energy")
        return {"avg_w": 1.0}


@pytest.mark.parametrize("first", [False, True])
def test_energy_loop_before_or_after_the_samples(tmp_path, first):
    from bench.case.power import CasePower
    from bench.sweep.runner import Runner
    from workloads.batch import make_batch

    path = config(tmp_path, "[naive_eager]", modes="[fwd]")
    path.write_text(
        path.read_text().replace(
            "power: {enabled: false}", f"power: {{energy_loop_s: 0.01, energy_loop_first: {str(first).lower()}}}"
        )
    )
    cfg = load_config(path)
    runner = Runner(cfg, tmp_path / "run", torch.device("cpu"), progress=False, log=lambda *_: None)
    events = []
    timed = runner.time

    def recorded(fn, between=None):
        events.append("samples")
        return timed(fn, between)

    runner.power = CasePower(_OrderMonitor(events), cfg.model.power, recorded, lambda: None)
    case = cfg.cases[0]
    q_len, kv_len, wstats = runner.build_workload(case.workload)
    batch = make_batch(q_len, kv_len, H=2, Hkv=2, D=16, dtype=torch.float32, device=torch.device("cpu"), seed=0)
    rec = runner.run_case(case, batch, wstats, flops=1.0)
    assert rec["status"] == "ok" and rec["power"] == {"avg_w": 1.0}
    assert events == (["energy", "samples"] if first else ["samples", "energy"])
    assert runner.writer.data["meta"]["power_config"]["energy_loop_first"] is first


def test_each_labelled_provider_is_built_once_and_recorded(tmp_path):
    import tests_support_providers as tsp

    cfg = config(tmp_path, "[naive_eager, {name: test_tunable, label: tun2, options: {scale: 2}}, test_tunable]")
    tsp.Tunable.instances = 0
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--no-progress"]) == 0
    # config load parses each entry's options once (2 entries); the runner builds one per label (2)
    assert tsp.Tunable.instances == 4
    data = results(out)
    assert len(data["cases"]) == 3 * 2 * 2 and all(c["status"] == "ok" for c in data["cases"])
    tun = [c for c in data["cases"] if c["provider"] == "tun2"]
    assert len(tun) == 4 and all(c["id"].endswith("/tun2") for c in tun)
    assert all(c["provider_name"] == "test_tunable" and c["provider_options"] == {"scale": 2} for c in tun)
    plain = next(c for c in data["cases"] if c["provider"] == "test_tunable")
    assert plain["provider_name"] == "test_tunable" and plain["provider_options"] is None
    assert data["meta"]["providers"]["tun2"] == {"name": "test_tunable", "options": {"scale": 2}}
    assert data["meta"]["gpu_count"] == 0 and data["meta"]["device"] == "cpu"  # GPUs used, not visible
    # --providers filters by label
    out2 = tmp_path / "run2"
    assert main(["run", str(cfg), "--out", str(out2), "--no-progress", "--providers", "tun2"]) == 0
    assert {c["provider"] for c in results(out2)["cases"]} == {"tun2"}


def test_results_csv_has_no_empty_column_and_parquet_keeps_samples(tmp_path):
    cfg = config(tmp_path, "[naive_eager, test_picky]", modes="[fwd]")
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--no-progress"]) == 0
    csv = pd.read_csv(out / "results.csv")
    assert len(csv) == 4 and not [c for c in csv.columns if csv[c].isna().all()]
    assert "tc_util_ncu" not in csv.columns and "power" not in csv.columns  # never set on this run
    assert {"n_samples", "tflops", "error", "correctness.rel_err"} <= set(csv.columns)
    pq = pd.read_parquet(out / "results.parquet")
    data = results(out)
    assert list(pq["id"]) == [c["id"] for c in data["cases"]]
    assert [list(t) if t is not None else [] for t in pq["times_ms"]] == [c["times_ms"] for c in data["cases"]]


def test_progress_is_one_live_bar_with_case_lines_above_it():
    """What a terminal shows: every line's text after its last carriage return. Each case line stands
    alone (the bar was cleared before it was printed) and the bar is drawn once, at the bottom."""
    import io

    from bench.sweep.progress import Progress

    buf = io.StringIO()
    p = Progress(3, True, file=buf)
    lines = [f"  s/fwd/L={L}/p: 1.234 GFLOP/s (5 ms)" for L in (8, 16, 32)]
    for i, line in enumerate(lines):
        p.started(line.split(":")[0].strip())
        p.finished(line, {"ok": i + 1})
    p.close()
    shown = [seg.rsplit("\r", 1)[-1].rstrip() for seg in buf.getvalue().split("\n")]
    shown = [s for s in shown if s.strip()]
    assert shown[:3] == [line.rstrip() for line in lines]
    assert len(shown) == 4 and "3/3" in shown[3] and "ok=3" in shown[3]
    # without a bar the lines go to the log function
    got = []
    q = Progress(1, False, log=got.append)
    q.finished(lines[0], {"ok": 1})
    q.close()
    assert got == [lines[0]]


def test_case_lines_print_cpu_rates_with_significant_digits():
    from bench.sweep.progress import format_rate
    from bench.sweep.runner import case_line

    # the unit its size reads in, as the report's tables (issue 32: a CPU run printed `1.728e-06 TFLOP/s`)
    assert format_rate(3.2e-7) == "320 kFLOP/s" and format_rate(0.5) == "500 GFLOP/s"
    assert format_rate(612.345) == "612.3 TFLOP/s" and format_rate(None) == "—"
    assert format_rate(1.728e-6) == "1.728 MFLOP/s" and format_rate(0.0) == "0 TFLOP/s"
    rec = {"id": "a/fwd/L=8/p", "status": "ok", "tflops": 1.5e-6, "median_ms": 12.0, "power": None}
    assert case_line(rec) == "  a/fwd/L=8/p: 1.5 MFLOP/s (12 ms)"


def test_python_api_runs_a_config_path_or_dict_and_returns_the_cases(tmp_path):
    import yaml

    import bench
    from bench.errors import ConfigError

    only = r"^tiny/(fwd|bwd)/L=24/fill=1\.0/(naive_eager|reference)$"
    df = bench.run(ROOT / "configs" / "smoke.yaml", only=only, out=tmp_path / "a", device="cpu")
    assert list(df["id"]) == [
        "tiny/fwd/L=24/fill=1.0/naive_eager",
        "tiny/fwd/L=24/fill=1.0/reference",
        "tiny/bwd/L=24/fill=1.0/naive_eager",
        "tiny/bwd/L=24/fill=1.0/reference",
    ]
    assert (df["status"] == "ok").all() and (df["tflops"] > 0).all() and (df["median_ms"] > 0).all()
    for col in ("provider", "mode", "flops", "util_peak", "speedup", "correctness.rel_err", "workload.total_q"):
        assert col in df.columns, col
    assert df.attrs["run_dir"] == str(tmp_path / "a") and (tmp_path / "a" / "results.parquet").exists()
    data = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    dfd = bench.run(data, only=only, providers="naive_eager", out=tmp_path / "b")
    assert list(dfd["id"]) == [i for i in df["id"] if i.endswith("naive_eager")]
    assert results(tmp_path / "b")["meta"]["config"] == "<config dict>"
    data["sets"][0]["activation"] = "swish"
    with pytest.raises(ConfigError) as exc:
        bench.run(data, out=tmp_path / "c")
    assert str(exc.value).startswith("<config dict>: sets.tiny.activation: unknown activation 'swish'; allowed:")
    assert not (tmp_path / "c").exists()


# ------------------------------------------------------------------------------ faults (issue 19)


class _Leaving(BaseException):
    """Not an Exception: what a provider may raise that `except Exception` would let through."""


@register
class _Exits(Provider):
    name = "test_exits"
    semantics = "gdpa"

    def forward(self, batch, spec):
        raise SystemExit(3)


@register
class _Leaves(Provider):
    name = "test_leaves"
    semantics = "gdpa"

    def forward(self, batch, spec):
        raise _Leaving("gone")


def test_a_provider_that_exits_is_recorded_failed_and_the_sweep_goes_on(tmp_path):
    cfg = config(tmp_path, "[test_exits, test_leaves, naive_eager]", modes="[fwd]")
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--no-progress", "--no-report"]) == 0
    data = results(out)
    by = {c["provider"]: c for c in data["cases"]}
    assert len(data["cases"]) == 6
    assert by["test_exits"]["status"] == "failed" and by["test_exits"]["error"] == "SystemExit: 3"
    assert by["test_leaves"]["status"] == "failed" and by["test_leaves"]["error"] == "_Leaving: gone"
    assert by["naive_eager"]["status"] == "ok"
    assert data["meta"]["interrupted"] is False and data["meta"]["harness_error"] is None
    assert "SystemExit" in (out / "errors.log").read_text()


def _only_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_disk_full_while_writing_results_is_one_line_and_leaves_no_temp_file(tmp_path, capsys, monkeypatch):
    import errno

    import results.files as results_module

    cfg = config(tmp_path, "[naive_eager]", modes="[fwd]")
    out = tmp_path / "run"
    real_fsync, writes = results_module.os.fsync, []

    def fsync(fd):  # results.json and .csv are written after every case: the disk fills after case 1
        writes.append(fd)
        if len(writes) > 6:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(results_module.os, "fsync", fsync)
    assert main(["run", str(cfg), "--out", str(out), "--no-progress"]) == 2
    line = _only_line(capsys.readouterr().err)
    assert "results.json: cannot write (No space left on device, ENOSPC)" in line, line
    assert not list(out.glob(".*.tmp"))  # no temporary file left behind
    monkeypatch.undo()
    assert [c["status"] for c in results(out)["cases"]] == ["ok"]  # the last good results.json stands


def test_read_only_places_are_one_line(tmp_path, capsys, monkeypatch):
    import errno

    import bench.sweep.rundir
    import results.files as results_module

    cfg = config(tmp_path, "[naive_eager]", modes="[fwd]")
    # a folder the user cannot write: refused before anything runs
    monkeypatch.setattr(bench.sweep.rundir.os, "access", lambda path, mode: False)
    assert main(["run", str(cfg), "--out", str(tmp_path / "ro" / "run"), "--no-progress"]) == 2
    line = _only_line(capsys.readouterr().err)
    assert line.startswith(f"error: --out {tmp_path / 'ro' / 'run'}: {tmp_path} is not writable"), line
    assert not (tmp_path / "ro").exists()
    monkeypatch.undo()

    # a file system that turns read-only during the run (EROFS on the rename)
    def replace(src, dst):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(results_module.os, "replace", replace)
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--no-progress"]) == 2
    line = _only_line(capsys.readouterr().err)
    assert "results.json: cannot write (Read-only file system, EROFS)" in line, line
    assert not list(out.glob(".*.tmp"))


def test_a_crash_of_the_harness_is_not_recorded_as_a_finished_run(tmp_path, monkeypatch):
    from bench.sweep.runner import Runner

    cfg = config(tmp_path, "[naive_eager]", modes="[fwd]")
    out = tmp_path / "run"
    real, seen = Runner._run_workload, []

    def run_workload(self, w, group, counts):
        seen.append(w)
        if len(seen) == 2:
            raise RuntimeError("a bug in the harness")
        real(self, w, group, counts)

    monkeypatch.setattr(Runner, "_run_workload", run_workload)
    with pytest.raises(RuntimeError, match="a bug in the harness"):  # a harness bug keeps its traceback
        main(["run", str(cfg), "--out", str(out), "--no-progress"])
    meta = results(out)["meta"]
    assert meta["interrupted"] is True and meta["harness_error"] == "RuntimeError: a bug in the harness"
    assert len(results(out)["cases"]) == 1


def test_resume_of_a_run_of_another_config_needs_force(tmp_path, capsys):
    cfg = config(tmp_path, "[naive_eager]", modes="[fwd]")
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--no-progress", "--no-report", "--only", "L=6"]) == 0
    first = results(out)["meta"]["config_sha256"]
    cfg.write_text(cfg.read_text().replace("name: t", "name: t2"))  # another config
    capsys.readouterr()
    assert main(["run", str(cfg), "--resume", str(out), "--no-progress"]) == 2
    line = _only_line(capsys.readouterr().err)
    assert "that run was made from config 't'" in line and "--force" in line
    assert len(results(out)["cases"]) == 1  # untouched
    assert main(["run", str(cfg), "--resume", str(out), "--force", "--no-progress", "--no-report"]) == 0
    meta = results(out)["meta"]
    assert len(results(out)["cases"]) == 2 and meta["config_name"] == "t2"
    assert meta["config_history"] == [{"config": str(cfg), "config_name": "t", "config_sha256": first}]


@pytest.mark.parametrize(
    ("key", "value", "extra"),
    [("sessions", [1], []), ("resumed_at", 5, []), ("retried", 5, ["--retry-failed"]), ("config_history", "x", [])],
)
def test_resume_of_a_run_with_a_damaged_meta_list_is_one_line(tmp_path, capsys, key, value, extra):
    """meta.sessions / resumed_at / retried / config_history are what a resume appends to: damaged by hand,
    the run is refused with one line naming the field (a traceback at the append before)."""
    cfg = config(tmp_path, "[naive_eager]", modes="[fwd]")
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--no-progress", "--no-report", "--only", "L=6"]) == 0
    data = results(out)
    data["meta"][key] = value
    (out / "results.json").write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["run", str(cfg), "--resume", str(out), "--no-progress", *extra]) == 2
    line = _only_line(capsys.readouterr().err)
    assert f"meta.{key} must be a list of" in line and "results.json" in line, line
    assert results(out) == data  # untouched


def test_resume_after_a_lengths_file_changed_needs_force(tmp_path, capsys):
    """The config's sha covers its text, not the empirical lengths file it names: a changed file under an unchanged
    config would put two batches in one workload. --resume compares the lengths it would draw with the run's."""
    cfg = config(tmp_path, "[naive_eager]", modes="[fwd]")
    (tmp_path / "lengths.txt").write_text("3 5 6 2\n")
    text = cfg.read_text().replace("{family: uniform_fill, fill: 0.5}", "{family: empirical, path: lengths.txt}")
    cfg.write_text(text.replace("max_len: [6, 9]", "max_len: [6]"))
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--no-progress", "--no-report"]) == 0
    done = results(out)
    done["cases"] = done["cases"][:0]  # as if interrupted before its case
    (out / "results.json").write_text(json.dumps(done))
    (tmp_path / "lengths.txt").write_text("6 6 6 6\n")
    capsys.readouterr()
    assert main(["run", str(cfg), "--resume", str(out), "--no-progress", "--no-report"]) == 2
    line = _only_line(capsys.readouterr().err)
    assert "workload s/L=6: its lengths differ from the run's" in line and "--force" in line
    assert main(["run", str(cfg), "--resume", str(out), "--force", "--no-progress", "--no-report"]) == 0


def test_cpu_runs_take_the_configured_reps_and_record_the_window(tmp_path):
    cfg = config(tmp_path, "[naive_eager]", modes="[fwd]")
    cfg.write_text(cfg.read_text().replace("min_reps: 2, max_reps: 2", "min_reps: 25, max_reps: 25"))
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--no-progress", "--no-report"]) == 0
    for c in results(out)["cases"]:
        assert len(c["times_ms"]) == 25  # not clamped to 20 on a CPU
        # results.json keeps each sample to SAMPLE_DIGITS significant digits (up to 5e-6 of a sample just past a
        # power of ten), timed_s is the unrounded samples' sum: equal to that precision (rel 1e-6 failed at random)
        assert c["timed_s"] == pytest.approx(sum(c["times_ms"]) / 1e3, rel=10 ** (1 - SAMPLE_DIGITS))
        assert c["drift"] is not None and 0 <= c["drift_p"] <= 1  # 25 samples: drift is computed
        assert c["sm_clock_mhz"] is None  # no GPU, no sampler


def test_a_second_ctrl_c_still_writes_the_report(tmp_path):
    (tmp_path / "slowprov.py").write_text(SLOW)
    cfg = config(tmp_path, "[test_slow]", modes="[fwd, bwd, fwd_bwd]")
    out_dir = tmp_path / "run"
    env = dict(
        os.environ,
        GDPA_BENCH_PROVIDERS="slowprov",
        PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", "run", str(cfg), "--out", str(out_dir), "--no-progress"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if len(results(out_dir)["cases"]) >= 1:
                break
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            pass
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)  # the report (plots) takes seconds to draw: the second Ctrl-C lands while it is written
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert "SIGINT again: still writing the results and the report" in err
    assert (out_dir / "report.md").exists() and (out_dir / "report.html").exists()
    assert results(out_dir)["meta"]["interrupted"] is True
    assert out.strip().splitlines()[-1].startswith("to continue: python -m bench run ")


def test_the_gemm_ceiling_is_measured_once_a_session(tmp_path, monkeypatch):
    """A fresh worker of the same session (after a fault, a hang) or a resume on the same machine keeps the run's
    calibration; a resume on another machine measures its own and the earlier one goes to calibration_history.
    (The calibration itself runs on a GPU only: its calls are stood in for here.)"""
    from types import SimpleNamespace

    from bench.sweep import runner as runner_mod
    from results.files import ResultsWriter

    measured = []

    def gemm(device, monitor, seconds):
        measured.append(seconds)
        return {"tflops_fresh": 600.0 + len(measured), "tflops_sustained": 500.0 + len(measured)}

    monkeypatch.setattr(runner_mod, "calibrate_gemm", gemm)
    monkeypatch.setattr(runner_mod, "calibrate_copy", lambda device: {"tb_per_s": 4.0})

    def calibrate(writer):
        r = runner_mod.Runner.__new__(runner_mod.Runner)
        r.device, r.monitor, r.writer, r.lines = SimpleNamespace(type="cuda"), None, writer, []
        r.settings = SimpleNamespace(hardware=SimpleNamespace(calibrate=True, calibrate_seconds=0.5))
        r.say = r.lines.append
        r._calibrate()
        return r

    meta = {"started_at": "t0", "host": "a", "gpu": "H200", "git_sha": "x", "calibration": None,
            "measured_gemm_tflops": None}  # fmt: skip
    first = ResultsWriter(tmp_path, dict(meta))
    calibrate(first)
    assert measured == [0.5] and first.meta["measured_gemm_tflops"] == 501.0
    assert first.meta["calibration"]["session"] == 0 and "calibration_history" not in first.meta
    data = json.loads((tmp_path / "results.json").read_text())

    same = calibrate(ResultsWriter(tmp_path, {**meta, "started_at": "t1"}, existing=data))
    assert measured == [0.5] and "not measured again" in same.lines[0]
    assert same.writer.meta["measured_gemm_tflops"] == 501.0

    data = json.loads((tmp_path / "results.json").read_text())
    other = calibrate(ResultsWriter(tmp_path, {**meta, "started_at": "t2", "host": "b"}, existing=data))
    assert len(measured) == 2 and other.writer.meta["measured_gemm_tflops"] == 502.0
    assert other.writer.meta["calibration"]["session"] == 1
    assert [c["gemm"]["tflops_sustained"] for c in other.writer.meta["calibration_history"]] == [501.0]


def test_parquet_takes_the_nested_lists_a_counters_record_holds(tmp_path):
    """`counters.replayed` holds the plan a case's ncu child replayed, [[backend, lo, hi], ...]: lists of words,
    numbers and nulls, which Parquet cannot type (the H200 run of 2026-12-05 lost its results.parquet to
    them). They are JSON text there, as the record tables are, and read back as the record holds them."""
    import json

    from results.files import write_parquet

    plan = [["triton", 0, 1024], ["hopper", 1024, None]]
    cases = [
        {"id": "a/fwd/gdpa", "times_ms": [0.5, 0.51], "counters": {"status": "ok", "replayed": {"fwd_plan": plan}}},
        {"id": "a/fwd/fa4", "times_ms": [0.7], "counters": {"status": "ok"}, "sweep": {"tags": ["x", 3]}},
        {"id": "b/fwd/gdpa", "times_ms": [0.4], "lengths": [3, 5, 7]},
    ]
    pq = pd.read_parquet(write_parquet(cases, tmp_path / "results.parquet"))
    assert json.loads(pq["counters.replayed.fwd_plan"][0]) == plan
    assert json.loads(pq["sweep.tags"][1]) == ["x", 3]
    assert list(pq["lengths"][2]) == [3, 5, 7]  # a list of one kind stays a list column
