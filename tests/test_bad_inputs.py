"""Bad input, as a new user gives it (issue 19): every one is exit code 2, one line naming the file, field
or option (and what is allowed), nothing on stdout, no traceback, and nothing written.

Each input runs the CLI in its own folder (the cwd): most of them in this process through
`bench.cli.main(argv)` (the return code, stdout/stderr captured, any exception that escapes is the
traceback a user would see), and the handful in `AS_PROCESS` as the real `python -m bench ...` with
PYTHONPATH at the repository, side by side in a thread pool, to prove what the process does (its exit
status, nothing else on stderr).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from bench.cli import main

ROOT = Path(__file__).resolve().parents[1]
WORKERS = min(4, (os.cpu_count() or 1) + 1)
TIMEOUT_S = 300

# a valid, tiny CPU config; every config input below is this with one thing wrong
BASE = {
    "name": "fuzz",
    "device": "cpu",
    "providers": ["naive_eager"],
    "modes": ["fwd"],
    "timing": {"warmup_ms": 1, "rep_ms": 2, "min_reps": 2, "max_reps": 2},
    "power": {"enabled": False},
    "hardware": {"calibrate": False},
    "output_dir": "runs",
    "sets": [
        {
            "name": "s",
            "B": 2,
            "H": 2,
            "D": 16,
            "dtype": "fp32",
            "max_len": 8,
            "lengths": {"family": "uniform_fill", "fill": 0.5},
            "kv": {"rule": "self"},
        }
    ],
}
DIR = object()  # a `files` value: make a directory
DROP = object()  # a config value: remove the key


def cfg(**top) -> dict:
    """BASE with top-level fields changed (DROP removes one)."""
    c = copy.deepcopy(BASE)
    for k, v in top.items():
        if v is DROP:
            c.pop(k, None)
        else:
            c[k] = v
    return c


def cfg_set(**fields) -> dict:
    """BASE with fields of its one set changed (DROP removes one)."""
    c = copy.deepcopy(BASE)
    for k, v in fields.items():
        if v is DROP:
            c["sets"][0].pop(k, None)
        else:
            c["sets"][0][k] = v
    return c


def empirical(path: str, **params) -> dict:
    return cfg_set(lengths={"family": "empirical", "path": path, **params})


def results(**over) -> dict:
    """A minimal valid results document with one ok case."""
    doc = {
        "schema": "gdpa-bench/1",
        "meta": {"gpu": "NVIDIA H200", "config_name": "fuzz"},
        "workloads": {},
        "cases": [{"id": "s/fwd/L=8/naive_eager", "status": "ok", "times_ms": [1.0, 1.1, 0.9, 1.0, 1.05, 0.95]}],
    }
    doc.update(over)
    return doc


def case_with(**fields) -> dict:
    c = dict(results()["cases"][0])
    for k, v in fields.items():
        if v is DROP:
            c.pop(k)
        else:
            c[k] = v
    return results(cases=[c])


def _parquet(path: Path, columns: dict) -> None:
    import pandas as pd

    pd.DataFrame(columns).to_parquet(path)


@dataclass(frozen=True)
class Bad:
    id: str
    argv: tuple[str, ...]  # after `python -m bench`
    needle: str  # must appear in the error line: the file, field or option it is about
    files: dict = field(default_factory=dict)  # name -> YAML dict | str | bytes | DIR | callable(path)
    env: dict = field(default_factory=dict)


def run_cfg(name: str, config, *extra: str, needle: str | None = None, files: dict | None = None, **kw) -> Bad:
    """`run cfg.yaml` with `config` (a dict written as YAML, or YAML text)."""
    files = {"cfg.yaml": config, **(files or {})}
    return Bad(name, ("run", "cfg.yaml", "--no-progress", *extra), needle or name, files, **kw)


def compare_bad(name: str, doc, needle: str, *extra: str) -> Bad:
    """`compare good.json bad.json` with `doc` (a dict written as JSON, or raw text) as the current run."""
    text = doc if isinstance(doc, str) else json.dumps(doc)
    return Bad(
        f"compare_{name}",
        ("compare", "good.json", "bad.json", *extra),
        needle,
        {"good.json": json.dumps(results()), "bad.json": text},
    )


GOOD_RUN = json.dumps(results())
EMPIRICAL_FILES: list[tuple[str, str, object, dict]] = [
    # (id, file name, content, extra lengths params)
    ("missing", "nope.txt", None, {}),
    ("directory", "lengths_dir", DIR, {}),
    ("empty", "empty.txt", "", {}),
    ("words", "words.txt", "3\nfive\n", {}),
    ("floats", "floats.txt", "3 4.5\n", {}),
    ("negative", "negative.txt", "3\n-4\n", {}),
    ("zeros", "zeros.txt", "0 0 0\n", {}),
    ("23_digits", "huge.txt", "3\n12345678901234567890123\n", {}),
    ("broken_parquet", "broken.parquet", "this is not parquet", {"column": "len"}),
    ("missing_column", "table.csv", "user,len\n1,3\n", {"column": "length"}),
    ("log_missing_user_column", "ratings.csv", "userId,movieId\n1,3\n", {"user_column": "user"}),
]


def _empirical_inputs(command: str) -> list[Bad]:
    out = []
    for name, fname, content, params in EMPIRICAL_FILES:
        files = {} if content is None else {fname: content}
        files["cfg.yaml"] = empirical(fname, **params)
        argv = ("run", "cfg.yaml", "--no-progress") if command == "run" else ("workloads", "cfg.yaml")
        out.append(Bad(f"{command}_empirical_{name}", argv, fname, files))
    return out


# ------------------------------------------------------------------------------------- handled today

BAD: list[Bad] = [
    # the config file itself
    Bad("config_missing", ("run", "nope.yaml"), "nope.yaml"),
    Bad("config_is_a_directory", ("run", "adir"), "adir", {"adir": DIR}),
    run_cfg("invalid_yaml", "a: [1,\n", needle="not valid YAML"),
    run_cfg("binary_yaml", b"\xff\xfe\x00garbage", needle="cfg.yaml"),
    run_cfg("top_level_list", "- 1\n- 2\n", needle="top level"),
    run_cfg("empty_config", "", needle="top level"),
    run_cfg("unknown_top_field", cfg(colour="blue"), needle="colour"),
    run_cfg("providers_missing", cfg(providers=DROP), needle="providers"),
    run_cfg("providers_empty", cfg(providers=[]), needle="providers"),
    run_cfg("provider_unknown", cfg(providers=["no_such_kernel"]), needle="no_such_kernel"),
    run_cfg("provider_twice", cfg(providers=["naive_eager", "naive_eager"]), needle="naive_eager"),
    run_cfg("baseline_not_a_provider_of_the_config", cfg(baseline="reference"), needle="baseline"),
    run_cfg("sets_missing", cfg(sets=DROP), needle="sets"),
    run_cfg("sets_empty", cfg(sets=[]), needle="sets"),
    run_cfg("set_name_twice", cfg(sets=[BASE["sets"][0], BASE["sets"][0]]), needle="twice"),
    run_cfg("device_tpu", cfg(device="tpu"), needle="device"),
    run_cfg("mode_unknown", cfg(modes=["sideways"]), needle="modes"),
    run_cfg("rep_ms_zero", cfg(timing={"rep_ms": 0}), needle="rep_ms"),
    run_cfg("rep_ms_nan", cfg(timing={"rep_ms": float("nan")}), needle="rep_ms"),
    run_cfg("min_reps_zero", cfg(timing={"min_reps": 0}), needle="min_reps"),
    run_cfg("timing_unknown_field", cfg(timing={"repeats": 5}), needle="repeats"),
    run_cfg("tolerance_negative", cfg(correctness={"tolerance": -1}), needle="tolerance"),
    run_cfg("power_period_zero", cfg(power={"period_ms": 0}), needle="period_ms"),
    run_cfg("peak_tflops_unknown_dtype", cfg(hardware={"peak_tflops": {"int8": 5}}), needle="int8"),
    run_cfg("power_cap_negative", cfg(hardware={"power_cap_w": -5}), needle="power_cap_w"),
    # a workload set
    run_cfg("B_missing", cfg_set(B=DROP), needle="B"),
    run_cfg("B_zero", cfg_set(B=0), needle="B"),
    run_cfg("B_word", cfg_set(B="many"), needle="B"),
    run_cfg("D_negative", cfg_set(D=-16), needle="D"),
    run_cfg("H_not_a_multiple_of_Hkv", cfg_set(H=3, Hkv=2), needle="Hkv"),
    run_cfg("dtype_int8", cfg_set(dtype="int8"), needle="dtype"),
    run_cfg("activation_unknown", cfg_set(activation="swish9"), needle="swish9"),
    run_cfg("max_len_zero", cfg_set(max_len=0), needle="max_len"),
    run_cfg("max_len_negative_in_sweep", cfg_set(max_len=[8, -8]), needle="max_len"),
    run_cfg("max_len_word", cfg_set(max_len="long"), needle="max_len"),
    run_cfg("seed_word", cfg_set(seed="lucky"), needle="seed"),
    run_cfg("lengths_not_a_mapping", cfg_set(lengths="uniform"), needle="lengths"),
    run_cfg("family_unknown", cfg_set(lengths={"family": "gaussian"}), needle="gaussian"),
    run_cfg("family_missing", cfg_set(lengths={"fill": 0.5}), needle="family"),
    run_cfg("fill_out_of_range", cfg_set(lengths={"family": "uniform_fill", "fill": 2}), needle="fill=2"),
    run_cfg("fill_bool", cfg_set(lengths={"family": "uniform_fill", "fill": True}), needle="fill=True"),
    run_cfg("fill_missing", cfg_set(lengths={"family": "uniform_fill"}), needle="fill"),
    run_cfg("family_param_typo", cfg_set(lengths={"family": "uniform_fill", "fil": 0.5}), needle="fil"),
    run_cfg("lognormal_preset_unknown", cfg_set(lengths={"family": "lognormal", "preset": "ml-1b"}), needle="ml-1b"),
    run_cfg(
        "lognormal_min_len_over_max_len",
        cfg_set(lengths={"family": "lognormal", "preset": "ml-20m", "min_len": 64}),
        needle="min_len",
    ),
    run_cfg("zipf_gamma_negative", cfg_set(lengths={"family": "zipf", "gamma": -1}), needle="gamma"),
    run_cfg("hstu_alpha_3", cfg_set(lengths={"family": "hstu_sl", "fill": 0.5, "alpha": 3}), needle="alpha"),
    run_cfg("spike_of_spike", cfg_set(lengths={"family": "spike", "p": 0.1, "base": "spike"}), needle="base"),
    run_cfg("empirical_path_not_text", empirical(5), needle="path"),
    run_cfg("empirical_column_and_user_column", empirical("x.csv", column="a", user_column="b"), needle="not both"),
    run_cfg("pairing_unknown", cfg_set(kv={"rule": "cross"}), needle="cross"),
    run_cfg("target_history_without_max_targets", cfg_set(kv={"rule": "target_history"}), needle="max_targets"),
    run_cfg("kv_len_zero", cfg_set(kv={"rule": "fixed_kv", "kv_len": 0}), needle="kv_len"),
    run_cfg("kv_len_bool", cfg_set(kv={"rule": "fixed_kv", "kv_len": True}), needle="kv_len"),
    # other commands reading a config
    Bad("workloads_config_missing", ("workloads", "nope.yaml"), "nope.yaml"),
    Bad(
        "workloads_family_unknown",
        ("workloads", "cfg.yaml"),
        "gaussian",
        {"cfg.yaml": cfg_set(lengths={"family": "gaussian"})},
    ),
    Bad(
        "list_fill_out_of_range",
        ("list", "cfg.yaml"),
        "fill=2",
        {"cfg.yaml": cfg_set(lengths={"family": "uniform_fill", "fill": 2})},
    ),
    # options
    run_cfg("only_not_a_regex", BASE, "--only", "(", needle="--only"),
    run_cfg("only_matches_nothing", BASE, "--only", "nothing-like-this", needle="--only"),
    run_cfg("providers_unknown", BASE, "--providers", "no_such_kernel", needle="no_such_kernel"),
    run_cfg("option_unknown", BASE, "--fast", needle="--fast"),
    run_cfg("device_not_a_number", BASE, "--device", "first", needle="--device"),
    run_cfg("gpus_not_a_list", BASE, "--gpus", "some", needle="--gpus"),
    run_cfg("case_list_missing", BASE, "--case-list", "nope.txt", needle="--case-list"),
    run_cfg("resume_without_results", BASE, "--resume", "old", needle="--resume", files={"old": DIR}),
    Bad("list_only_not_a_regex", ("list", "cfg.yaml", "--only", "(["), "--only", {"cfg.yaml": BASE}),
    Bad("no_command", (), "command"),
    Bad("unknown_command", ("frobnicate",), "frobnicate"),
    Bad("env_device_not_a_number", ("env", "--device", "first"), "--device"),
    # report
    Bad("report_no_results", ("report", "run"), "results.json", {"run": DIR}),
    Bad("report_invalid_json", ("report", "run"), "not valid JSON", {"run": DIR, "run/results.json": '{"schema": '}),
    Bad(
        "report_wrong_schema",
        ("report", "run"),
        "schema",
        {"run": DIR, "run/results.json": json.dumps(results(schema="other/2"))},
    ),
    Bad("report_not_an_object", ("report", "run"), "JSON object", {"run": DIR, "run/results.json": "[1, 2]"}),
    Bad(
        "report_cases_not_a_list",
        ("report", "run"),
        "cases",
        {"run": DIR, "run/results.json": json.dumps(results(cases={"a": 1}))},
    ),
    # compare (the CI gate)
    Bad("compare_baseline_missing", ("compare", "nope.json", "good.json"), "nope.json", {"good.json": GOOD_RUN}),
    compare_bad("invalid_json", '{"schema": "gdpa-bench/1", "cases": [', "not valid JSON"),
    compare_bad("wrong_schema", results(schema="other/2"), "schema"),
    compare_bad("not_an_object", "[1, 2]", "JSON object"),
    compare_bad("case_without_status", case_with(status=DROP), "status"),
    compare_bad("status_unknown", case_with(status="fine"), "status"),
    compare_bad("samples_are_strings", case_with(times_ms=["1.0", "1.1"]), "times_ms"),
    compare_bad("samples_not_a_list", case_with(times_ms=1.0), "times_ms"),
    compare_bad("sample_negative", case_with(times_ms=[1.0, -1.0]), "times_ms"),
    compare_bad("median_is_text", case_with(median_ms="fast"), "median_ms"),
    compare_bad("ok_without_timing", case_with(times_ms=[]), "no timing"),
    compare_bad("power_not_an_object", case_with(power=3), "power"),
    compare_bad("clock_is_text", case_with(power={"sm_clock_mhz_median": "high"}), "sm_clock_mhz_median"),
    compare_bad("meta_null", results(meta=None), "meta"),
    compare_bad("meta_absent", {k: v for k, v in results().items() if k != "meta"}, "meta"),
    compare_bad("case_without_id", case_with(id=DROP), "id"),
    compare_bad("duplicate_case_id", results(cases=results()["cases"] * 2), "same id"),
    compare_bad("no_common_case", case_with(id="other/fwd/L=8/naive_eager"), "no common case"),
    compare_bad("threshold_negative", results(), "--threshold", "--threshold", "-1"),
    compare_bad("alpha_out_of_range", results(), "--alpha", "--alpha", "1.5"),
    compare_bad("drift_threshold_zero", results(), "--drift-threshold", "--drift-threshold", "0"),
    compare_bad("option_unknown", results(), "--strict", "--strict"),
    # workloads sampled at load: every bad empirical file, in `run` and in `workloads`
    *_empirical_inputs("run"),
    *_empirical_inputs("workloads"),
    Bad(
        "list_empirical_words",
        ("list", "cfg.yaml"),
        "words.txt",
        {"words.txt": "3 five\n", "cfg.yaml": empirical("words.txt")},
    ),
    # set 1 is fine, set 2 reads a bad file: nothing may run (today set 1 runs, then a traceback)
    run_cfg(
        "bad_set_second_of_three",
        cfg(
            sets=[
                dict(BASE["sets"][0], name="s1"),
                dict(empirical("words.txt")["sets"][0], name="s2"),
                dict(BASE["sets"][0], name="s3"),
            ]
        ),
        needle="words.txt",
        files={"words.txt": "3 five\n"},
    ),
    run_cfg("seed_negative", cfg_set(seed=-1), needle="seed"),
    run_cfg("seed_negative_in_sweep", cfg_set(seed=[0, -1]), needle="seed"),
    Bad("workloads_seed_negative", ("workloads", "cfg.yaml"), "seed", {"cfg.yaml": cfg_set(seed=-1)}),
    # values pydantic coerces or lets through
    run_cfg("max_len_true", cfg_set(max_len=True), needle="max_len"),
    run_cfg("B_true", cfg_set(B=True), needle="B"),
    run_cfg("alpha_nan", cfg_set(alpha=float("nan")), needle="alpha"),
    run_cfg("alpha_inf", cfg_set(alpha=float("inf")), needle="alpha"),
    run_cfg("qk_scale_nan", cfg_set(qk_scale=float("nan")), needle="qk_scale"),
    run_cfg("warmup_ms_inf", cfg(timing={"warmup_ms": float("inf")}), needle="warmup_ms"),
    run_cfg("min_reps_over_max_reps", cfg(timing={"min_reps": 10, "max_reps": 2}), needle="min_reps"),
    run_cfg("overhead_check_not_a_regex", cfg(power={"enabled": True, "overhead_check": "("}), needle="overhead_check"),
    # the last `name:` wins silently today; the run then goes ahead
    run_cfg("duplicate_yaml_key", yaml.safe_dump(BASE, sort_keys=False) + "name: again\n", needle="name"),
    run_cfg("modes_twice", cfg(modes=["fwd", "fwd"]), needle="modes"),
    # run names and output folders
    run_cfg("name_leaves_output_dir", cfg(name="../../escaped"), needle="name"),
    run_cfg("out_is_a_file", BASE, "--out", "taken.txt", needle="taken.txt", files={"taken.txt": "x"}),
    run_cfg("out_under_a_file", BASE, "--out", "taken.txt/run", needle="taken.txt", files={"taken.txt": "x"}),
    run_cfg("output_dir_under_a_file", cfg(output_dir="taken.txt/runs"), needle="taken.txt", files={"taken.txt": "x"}),
    run_cfg(
        "out_onto_an_existing_run",
        BASE,
        "--out",
        "prev",
        needle="prev",
        files={"prev": DIR, "prev/results.json": GOOD_RUN},
    ),
    run_cfg(
        "resume_with_out",
        BASE,
        "--resume",
        "prev",
        "--out",
        "other",
        needle="--out",
        files={"prev": DIR, "prev/results.json": GOOD_RUN},
    ),
    run_cfg(
        "resume_truncated_results",
        BASE,
        "--resume",
        "prev",
        needle="results.json",
        files={"prev": DIR, "prev/results.json": GOOD_RUN[: len(GOOD_RUN) // 2]},
    ),
    run_cfg(
        "resume_results_not_an_object",
        BASE,
        "--resume",
        "prev",
        needle="results.json",
        files={"prev": DIR, "prev/results.json": "[]"},
    ),
    run_cfg(
        "resume_results_other_schema",
        BASE,
        "--resume",
        "prev",
        needle="schema",
        files={"prev": DIR, "prev/results.json": json.dumps(results(schema="other/2"))},
    ),
    run_cfg(
        "resume_run_of_another_config",
        BASE,
        "--resume",
        "prev",
        needle="config",
        files={
            "prev": DIR,
            "prev/results.json": json.dumps(
                results(meta={"config_name": "other", "config_sha256": "0" * 64, "config": "other.yaml"})
            ),
        },
    ),
    run_cfg("gpus_without_a_gpu", BASE, "--gpus", "all", needle="--gpus"),
    # a provider module that does not import
    run_cfg("provider_module_missing", BASE, needle="no.such.module", env={"GDPA_BENCH_PROVIDERS": "no.such.module"}),
    Bad("env_provider_module_missing", ("env",), "no.such.module", env={"GDPA_BENCH_PROVIDERS": "no.such.module"}),
    # report
    Bad(
        "report_baseline_unknown",
        ("report", "run", "--baseline", "nobody"),
        "nobody",
        {"run": DIR, "run/results.json": GOOD_RUN},
    ),
    run_cfg("force_without_resume", BASE, "--force", needle="--force"),
]
# As real processes: the exit status and stderr of `python -m bench` itself, for each kind of input (a
# config, a lengths file, an argparse error, a provider module, an option, a results file, --out/--resume).
AS_PROCESS = {
    "config_missing",
    "run_empirical_words",
    "option_unknown",
    "no_command",
    "provider_module_missing",
    "env_provider_module_missing",
    "gpus_without_a_gpu",
    "out_onto_an_existing_run",
    "resume_truncated_results",
    "compare_invalid_json",
}


# ------------------------------------------------------------------------------------------- harness


@dataclass
class Outcome:
    rc: int | None
    stdout: str
    stderr: str
    new_files: list[str]


def _materialise(folder: Path, files: dict) -> None:
    folder.mkdir(parents=True)
    for name, content in files.items():
        p = folder / name
        if content is DIR:
            p.mkdir(parents=True, exist_ok=True)
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Callable):
            content(p)
        elif isinstance(content, dict):
            p.write_text(yaml.safe_dump(content, sort_keys=False))
        elif isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)


def _tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts}


def _run(bad: Bad, folder: Path) -> Outcome:
    """`python -m bench ...` as a process."""
    _materialise(folder, bad.files)
    before = _tree(folder)
    env = {k: v for k, v in os.environ.items() if k != "GDPA_BENCH_PROVIDERS"}
    env.update(
        PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        OMP_NUM_THREADS="1",
        COLUMNS="100",
        **bad.env,
    )
    try:
        p = subprocess.run(
            [sys.executable, "-m", "bench", *bad.argv],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = None, str(e.stdout or ""), f"timed out after {TIMEOUT_S} s"
    return Outcome(rc, out, err, sorted(_tree(folder) - before))


def _run_here(bad: Bad, folder: Path, monkeypatch, capsys) -> Outcome:
    """`bench.cli.main(argv)` in this process, in `folder`: an exception that escapes main is the
    traceback `python -m bench` would print."""
    _materialise(folder, bad.files)
    before = _tree(folder)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("GDPA_BENCH_PROVIDERS", raising=False)
    for k, v in bad.env.items():
        monkeypatch.setenv(k, v)
    capsys.readouterr()
    tb = ""
    try:
        rc = main(list(bad.argv))
    except SystemExit as e:  # what `python -m bench` would exit with
        rc = e.code
    except BaseException:
        rc, tb = None, traceback.format_exc()
    out, err = capsys.readouterr()
    return Outcome(rc, out, err + tb, sorted(_tree(folder) - before))


@pytest.fixture(scope="module")
def outcomes(request, tmp_path_factory):
    """Launch the selected AS_PROCESS inputs at once (a pool of WORKERS); each test waits for its own."""
    selected = {
        item.callspec.params["bad"].id: item.callspec.params["bad"]
        for item in request.session.items
        if item.module is request.module
        and hasattr(item, "callspec")
        and "bad" in item.callspec.params
        and item.callspec.params["bad"].id in AS_PROCESS
    }
    base = tmp_path_factory.mktemp("bad_inputs")
    pool = ThreadPoolExecutor(max_workers=WORKERS)
    yield {i: pool.submit(_run, b, base / i) for i, b in selected.items()}
    pool.shutdown(wait=True, cancel_futures=True)


def _check(bad: Bad, o: Outcome) -> None:
    assert "Traceback" not in o.stderr + o.stdout, o.stderr[-3000:]
    assert o.rc == 2, (o.rc, o.stderr[-2000:], o.stdout[-1000:])
    lines = [line for line in o.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines  # one line: no usage block, no second message
    assert bad.needle in lines[0], (bad.needle, lines[0])
    assert o.stdout.strip() == "", o.stdout[-1000:]
    assert o.new_files == [], o.new_files  # bad input writes nothing


def test_inputs_are_distinct_and_many():
    ids = [b.id for b in BAD]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 60
    assert AS_PROCESS <= set(ids)


@pytest.mark.parametrize("bad", [pytest.param(b, id=b.id) for b in BAD])
def test_bad_input(bad: Bad, outcomes, tmp_path, monkeypatch, capsys):
    if bad.id in AS_PROCESS:
        o = outcomes[bad.id].result(timeout=TIMEOUT_S * 4)
    else:
        o = _run_here(bad, tmp_path / "cwd", monkeypatch, capsys)
    _check(bad, o)


def test_relative_empirical_path_is_taken_from_the_config_folder(tmp_path, monkeypatch, capsys):
    """A config and its lengths file move together: `path: lengths.txt` is read next to the config,
    whatever the current directory (workloads.resolve_family_params(..., base_dir=<config folder>)); the
    case ids keep the path as written."""
    _materialise(tmp_path / "project", {"cfg.yaml": empirical("lengths.txt"), "lengths.txt": "3 5 7\n"})
    cfg_path = tmp_path / "project" / "cfg.yaml"
    o = _run_here(
        Bad("rel", ("workloads", str(cfg_path), "--out", "w"), ""), tmp_path / "elsewhere", monkeypatch, capsys
    )
    assert o.rc == 0, o.stderr[-2000:]
    assert "Traceback" not in o.stderr

    from bench.config import load_config

    w = load_config(cfg_path).cases[0].workload
    assert w.family_params["path"] == str(tmp_path / "project" / "lengths.txt")
    assert set(w.lengths()[0]) <= {3, 5, 7}  # drawn from the file
    assert [c.id for c in load_config(cfg_path).cases] == ["s/fwd/L=8/naive_eager"]  # ids keep what was written
