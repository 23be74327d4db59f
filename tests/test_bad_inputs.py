"""Bad input, as a new user gives it (issue 19): every one is exit code 2, one line naming the file, field
or option (and what is allowed), nothing on stdout, no traceback, and nothing written.

Each input runs the CLI in its own folder (the cwd): most of them in this process through
`bench.cli.parser.main(argv)` (the return code, stdout/stderr captured, any exception that escapes is the
traceback a user would see), and the handful in `AS_PROCESS` as the real `python -m bench ...` with
PYTHONPATH at the repository, side by side in a thread pool, to prove what the process does (its exit
status, nothing else on stderr).
"""

from __future__ import annotations

import copy
import json
import os
import resource
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import yaml

from bench.cli.parser import main

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


# ------------------------------------------------------------------------------- hostile input (issue 25)


def fifo(path: Path) -> None:
    os.mkfifo(path)


def sparse(nbytes: int) -> Callable[[Path], None]:
    """A file of `nbytes` that takes no disk (a size guard must refuse it before reading)."""

    def make(path: Path) -> None:
        with open(path, "wb") as f:
            f.truncate(nbytes)

    return make


def deep_json(n: int) -> str:
    return "[" * n + "]" * n


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """`a0: &a0 [x, x, ...]`, `a1: &a1 [*a0, *a0, ...]`, ...: width**levels values once expanded."""
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def bomb_as(field: str) -> str:
    """BASE as YAML with `field:` set to the alias bomb's last level."""
    body = yaml.safe_dump({k: v for k, v in BASE.items() if k != field}, sort_keys=False)
    return "x-bomb:\n" + "".join("  " + line + "\n" for line in alias_bomb().splitlines()) + f"{field}: *a8\n" + body


def results_text(doc: dict, **swap: str) -> str:
    """`doc` as JSON with placeholders replaced by raw text (numbers JSON cannot carry from Python)."""
    text = json.dumps(doc)
    for k, v in swap.items():
        text = text.replace(f'"{k}"', v)
    return text


HUGE_INT = "9" * 5001
RESULTS_HUGE_INT = results_text(case_with(times_ms=["@big"]), **{"@big": HUGE_INT})
RESULTS_WIDE_INT = results_text(case_with(times_ms=["@big"]), **{"@big": "1" + "0" * 30})
RESULTS_DEEP = deep_json(100_000)
RESULTS_70_DEEP = json.dumps(results(extra=json.loads(deep_json(70))))
LONG = "n" * 300


def report_bad(name: str, content, needle: str) -> Bad:
    """`report run` with `content` as run/results.json (a dict is written as JSON)."""
    text = json.dumps(content) if isinstance(content, dict) else content
    return Bad(f"report_{name}", ("report", "run"), needle, {"run": DIR, "run/results.json": text})


def resume_bad(name: str, content, needle: str) -> Bad:
    return run_cfg(
        f"resume_{name}", BASE, "--resume", "prev", needle=needle, files={"prev": DIR, "prev/results.json": content}
    )


def merge_bad(name: str, plan, needle: str) -> Bad:
    text = plan if isinstance(plan, str) or callable(plan) else json.dumps(plan)
    return Bad(f"merge_{name}", ("merge", "run"), needle, {"run": DIR, "run/multigpu.json": text})


def workloads_out(name: str, out: str, needle: str, files: dict | None = None) -> Bad:
    return Bad(
        f"workloads_out_{name}", ("workloads", "cfg.yaml", "--out", out), needle, {"cfg.yaml": BASE, **(files or {})}
    )


def set2(**fields) -> dict:
    """BASE with a second, valid-looking set whose fields are changed: it must not be dropped silently."""
    c = copy.deepcopy(BASE)
    c["sets"].append(dict(BASE["sets"][0], name="t", **fields))
    return c


HOSTILE: dict[str, list[Bad]] = {
    "paths (length, NUL, empty, characters)": [
        run_cfg("out_name_over_name_max", BASE, "--out", LONG, needle="255"),
        run_cfg("out_path_over_path_max", BASE, "--out", "d/" * 2100, needle="4095"),
        run_cfg("out_with_nul", BASE, "--out", "a\0b", needle="NUL"),
        run_cfg("out_empty", BASE, "--out", "", needle="--out"),
        run_cfg("resume_empty", BASE, "--resume", "", needle="--resume"),
        run_cfg("resume_name_over_name_max", BASE, "--resume", LONG, needle="255"),
        run_cfg("output_dir_with_nul", cfg(output_dir="runs\0x"), needle="output_dir"),
        run_cfg("output_dir_name_300_chars", cfg(output_dir=LONG), needle="output_dir"),
        run_cfg("output_dir_empty", cfg(output_dir=""), needle="output_dir"),
        run_cfg("set_name_300_chars", cfg_set(name=LONG), needle="name"),
        run_cfg("set_name_with_nul", cfg_set(name="s\0"), needle="name"),
        run_cfg("set_name_with_space", cfg_set(name="my set"), needle="name"),
        run_cfg("set_name_with_slash", cfg_set(name="a/b"), needle="name"),
        run_cfg("set_name_dot_dot", cfg_set(name=".."), needle="name"),
        run_cfg("config_name_300_chars", cfg(name=LONG), needle="name"),
        run_cfg("provider_label_300_chars", cfg(providers=[{"name": "naive_eager", "label": LONG}]), needle="label"),
        Bad("config_path_with_nul", ("run", "cfg\0.yaml"), "NUL"),
        Bad("config_path_over_name_max", ("run", LONG + ".yaml"), "255"),
        Bad("report_dir_over_name_max", ("report", LONG), "255"),
        Bad("report_dir_with_nul", ("report", "r\0un"), "NUL"),
        Bad("compare_path_over_name_max", ("compare", LONG, "good.json"), "255", {"good.json": GOOD_RUN}),
        Bad("merge_dir_with_nul", ("merge", "r\0"), "NUL"),
        Bad("merge_no_such_folder", ("merge", "nope"), "nope"),
        Bad("merge_folder_without_plan", ("merge", "run"), "multigpu.json", {"run": DIR}),
        workloads_out("is_a_file", "taken.txt", "taken.txt", {"taken.txt": "x"}),
        workloads_out("under_a_file", "taken.txt/w", "taken.txt", {"taken.txt": "x"}),
        workloads_out("empty", "", "--out"),
        workloads_out("over_name_max", LONG, "255"),
        workloads_out("under_proc", "/proc/gdpa-bench-w", "/proc/gdpa-bench-w"),
        run_cfg("out_under_proc", BASE, "--out", "/proc/gdpa-bench-x", needle="/proc/gdpa-bench-x"),
        run_cfg("empirical_path_with_nul", empirical("a\0b.txt"), needle="path"),
        run_cfg("case_list_is_a_folder", BASE, "--case-list", "ids", needle="--case-list", files={"ids": DIR}),
    ],
    "FIFOs, folders and special files": [
        Bad("config_is_a_fifo", ("run", "cfg.yaml"), "cfg.yaml", {"cfg.yaml": fifo}),
        Bad("config_is_dev_null", ("run", "/dev/null"), "/dev/null"),
        Bad("config_folder_says_folder", ("run", "adir"), "folder", {"adir": DIR}),
        Bad("list_config_is_a_fifo", ("list", "cfg.yaml"), "cfg.yaml", {"cfg.yaml": fifo}),
        Bad("config_symlink_loop", ("run", "loop.yaml"), "loop.yaml", {"loop.yaml": lambda p: os.symlink(p.name, p)}),
        report_bad("results_is_a_fifo", fifo, "results.json"),
        report_bad("results_is_a_folder", DIR, "results.json"),
        Bad(
            "compare_current_is_a_fifo",
            ("compare", "good.json", "cur.json"),
            "cur.json",
            {"good.json": GOOD_RUN, "cur.json": fifo},
        ),
        Bad(
            "compare_baseline_is_a_fifo",
            ("compare", "base.json", "good.json"),
            "base.json",
            {"good.json": GOOD_RUN, "base.json": fifo},
        ),
        Bad(
            "compare_baseline_is_dev_zero", ("compare", "/dev/zero", "good.json"), "/dev/zero", {"good.json": GOOD_RUN}
        ),
        resume_bad("results_is_a_fifo", fifo, "results.json"),
        merge_bad("plan_is_a_fifo", fifo, "multigpu.json"),
        run_cfg("case_list_is_a_fifo", BASE, "--case-list", "ids.txt", needle="--case-list", files={"ids.txt": fifo}),
        run_cfg(
            "empirical_file_is_a_fifo", empirical("lengths.txt"), needle="lengths.txt", files={"lengths.txt": fifo}
        ),
        Bad(
            "workloads_empirical_is_a_fifo",
            ("workloads", "cfg.yaml"),
            "lengths.txt",
            {"cfg.yaml": empirical("lengths.txt"), "lengths.txt": fifo},
        ),
    ],
    "sizes (files, values, batches, budgets)": [
        Bad("config_5_mib", ("run", "cfg.yaml"), "MiB", {"cfg.yaml": sparse(5 * 2**20)}),
        run_cfg("yaml_value_100k_chars", cfg(description="d" * 100_000), needle="characters"),
        report_bad("results_600_mib", sparse(600 * 2**20), "MiB"),
        Bad(
            "compare_results_600_mib",
            ("compare", "good.json", "big.json"),
            "MiB",
            {"good.json": GOOD_RUN, "big.json": sparse(600 * 2**20)},
        ),
        run_cfg("B_1e9", cfg_set(B=10**9), needle="B="),
        Bad("list_B_2_31", ("list", "cfg.yaml"), "B", {"cfg.yaml": cfg_set(B=2**31 - 1)}),
        Bad(
            "list_max_len_2_31",
            ("list", "cfg.yaml"),
            "int32",
            {"cfg.yaml": cfg_set(max_len=2**31 - 1, lengths={"family": "uniform_fill", "fill": 1.0})},
        ),
        run_cfg("max_len_over_int32", cfg_set(max_len=2**31), needle="max_len"),
        run_cfg("B_over_int32", cfg_set(B=2**31), needle="B"),
        run_cfg(
            "tokens_over_int32",
            cfg_set(B=4, max_len=2**30, lengths={"family": "uniform_fill", "fill": 1.0}),
            needle="int32",
        ),
        run_cfg("zipf_support_1e9", cfg_set(max_len=10**9, lengths={"family": "zipf", "gamma": 2.0}), needle="zipf"),
        run_cfg("H_D_100000", cfg_set(H=100_000, D=100_000), needle="no selected case fits"),
        run_cfg(
            "max_len_1e7",
            cfg_set(B=64, max_len=10**7, lengths={"family": "uniform_fill", "fill": 1.0}),
            needle="no selected case fits",
        ),
        run_cfg("kv_len_1e9", cfg_set(kv={"rule": "fixed_kv", "kv_len": 10**9}), needle="no selected case fits"),
        run_cfg(
            "kv_len_1e8_as_float", cfg_set(B=8, kv={"rule": "fixed_kv", "kv_len": 2e8}), needle="no selected case fits"
        ),
        run_cfg("rep_ms_1e9", cfg(timing={"rep_ms": 1e9, "max_reps": 10**9}), needle="rep_ms"),
        run_cfg("max_reps_1e9", cfg(timing={"max_reps": 10**9}), needle="max_reps"),
        run_cfg("warmup_ms_1e9", cfg(timing={"warmup_ms": 1e9}), needle="warmup_ms"),
        run_cfg("energy_loop_1e9_s", cfg(power={"energy_loop_s": 1e9}), needle="energy_loop_s"),
        run_cfg("settle_1e9_s", cfg(power={"settle_s": 1e9}), needle="settle_s"),
        run_cfg("calibrate_seconds_1e9", cfg(hardware={"calibrate_seconds": 1e9}), needle="calibrate_seconds"),
        run_cfg("period_ms_microseconds", cfg(power={"period_ms": 0.001}), needle="period_ms"),
        run_cfg(
            "sweep_of_a_million_workloads",
            cfg_set(
                max_len=list(range(1, 101)),
                seed=list(range(100)),
                lengths={"family": "uniform_fill", "fill": [0.5, 1.0]},
            ),
            needle="workloads",
        ),
        run_cfg("description_20k_chars", cfg(description="d" * 20_000), needle="description"),
    ],
    "nesting depth": [
        run_cfg("yaml_50000_deep", "a: " + "[" * 50_000 + "]" * 50_000 + "\n", needle="nested"),
        run_cfg(
            "yaml_40_deep_mapping",
            "".join("  " * i + f"k{i}:\n" for i in range(40)) + "  " * 40 + "v: 1\n",
            needle="nested",
        ),
        report_bad("results_100000_deep", RESULTS_DEEP, "nested"),
        report_bad("results_70_deep", RESULTS_70_DEEP, "nested"),
        Bad(
            "compare_results_100000_deep",
            ("compare", "good.json", "deep.json"),
            "nested",
            {"good.json": GOOD_RUN, "deep.json": RESULTS_DEEP},
        ),
        resume_bad("results_100000_deep", RESULTS_DEEP, "nested"),
        merge_bad("plan_100000_deep", deep_json(100_000), "nested"),
    ],
    "integer digits": [
        run_cfg(
            "yaml_seed_5001_digits",
            yaml.safe_dump(BASE, sort_keys=False).replace("max_len: 8", "max_len: 8\n  seed: " + HUGE_INT),
            needle="digits",
        ),
        run_cfg("seed_2_64", cfg_set(seed=2**64), needle="seed"),
        run_cfg("seed_2_63", cfg_set(seed=2**63), needle="seed"),
        run_cfg("B_30_digits", cfg_set(B=10**30), needle="digits"),
        report_bad("results_5001_digit_int", RESULTS_HUGE_INT, "digits"),
        report_bad("results_31_digit_int", RESULTS_WIDE_INT, "digits"),
        Bad(
            "compare_results_5001_digit_int",
            ("compare", "good.json", "big.json"),
            "digits",
            {"good.json": GOOD_RUN, "big.json": RESULTS_HUGE_INT},
        ),
        Bad(
            "compare_results_31_digit_int",
            ("compare", "good.json", "big.json"),
            "digits",
            {"good.json": GOOD_RUN, "big.json": RESULTS_WIDE_INT},
        ),
        resume_bad("results_5001_digit_int", RESULTS_HUGE_INT, "digits"),
        run_cfg(
            "empirical_5001_digits",
            empirical("huge.txt"),
            needle="huge.txt",
            files={"huge.txt": "3\n" + HUGE_INT + "\n"},
        ),
        run_cfg(
            "fill_5001_digits",
            yaml.safe_dump(BASE, sort_keys=False).replace("fill: 0.5", "fill: " + HUGE_INT),
            needle="digits",
        ),
        Bad(
            "compare_min_samples_40_digits",
            ("compare", "good.json", "good.json", "--min-samples", "9" * 40),
            "--min-samples",
            {"good.json": GOOD_RUN},
        ),
        run_cfg(
            "empirical_csv_5001_digits",
            empirical("t.csv", column="len"),
            needle="t.csv",
            files={"t.csv": "len\n" + HUGE_INT + "\n"},
        ),
    ],
    "YAML aliases": [
        run_cfg("alias_bomb_as_device", bomb_as("device"), needle="alias"),
        run_cfg("alias_bomb_as_modes", bomb_as("modes"), needle="alias"),
        run_cfg("alias_bomb_as_sets", bomb_as("sets"), needle="alias"),
        run_cfg("alias_bomb_as_description", bomb_as("description"), needle="alias"),
        run_cfg("recursive_alias", "a: &a [*a]\n" + yaml.safe_dump(BASE, sort_keys=False), needle="itself"),
        Bad("list_alias_bomb", ("list", "cfg.yaml"), "alias", {"cfg.yaml": bomb_as("modes")}),
    ],
    "unicode digits and non-ASCII numbers": [
        run_cfg("empirical_arabic_indic_digits", empirical("ar.txt"), needle="ar.txt", files={"ar.txt": "٣\n٤٥\n"}),
        run_cfg("empirical_fullwidth_digits", empirical("fw.txt"), needle="fw.txt", files={"fw.txt": "３ ４\n"}),
        run_cfg(
            "empirical_csv_column_arabic_digits",
            empirical("t.csv", column="len"),
            needle="t.csv",
            files={"t.csv": "len\n٣\n"},
        ),
        run_cfg("max_len_arabic_digits", cfg_set(max_len="٣٣"), needle="max_len"),
        run_cfg("B_devanagari_digits", cfg_set(B="४"), needle="B"),
        run_cfg("device_arabic_digit", BASE, "--device", "١", needle="--device"),
        run_cfg("gpus_arabic_digits", BASE, "--gpus", "٠,١", needle="--gpus"),
        compare_bad("threshold_arabic_digits", results(), "--threshold", "--threshold", "٠.٥"),
        compare_bad("min_samples_fullwidth", results(), "--min-samples", "--min-samples", "５"),
        Bad("env_device_arabic_digit", ("env", "--device", "١"), "--device"),
    ],
    "empty sweeps and silently dropped sets": [
        run_cfg("second_set_max_len_empty", set2(max_len=[]), needle="max_len"),
        run_cfg("second_set_activation_empty", set2(activation=[]), needle="activation"),
        run_cfg("second_set_fill_empty", set2(lengths={"family": "uniform_fill", "fill": []}), needle="fill"),
        run_cfg("second_set_providers_empty", set2(providers=[]), needle="providers"),
        run_cfg("second_set_seed_empty", set2(seed=[]), needle="seed"),
        run_cfg("second_set_sort_empty", set2(sort_by_length=[]), needle="sort_by_length"),
        run_cfg("second_set_kv_len_empty", set2(kv={"rule": "fixed_kv", "kv_len": []}), needle="kv_len"),
        run_cfg("second_set_modes_empty", set2(modes=[]), needle="modes"),
        run_cfg("modes_empty", cfg(modes=[]), needle="modes"),
    ],
    "device flags on CPU configs": [
        run_cfg("device_99_on_cpu", BASE, "--device", "99", needle="--device 99"),
        run_cfg("device_minus_3_on_cpu", BASE, "--device", "-3", needle="--device -3"),
        run_cfg("device_0_on_cpu", BASE, "--device", "0", needle="device: cpu"),
        run_cfg("device_1_7", BASE, "--device", "1.7", needle="--device"),
        run_cfg("device_empty", BASE, "--device", "", needle="--device"),
    ],
    "results files report and compare must agree on": [
        report_bad("duplicate_ids", results(cases=results()["cases"] * 2), "same id"),
        report_bad("times_ms_text", case_with(times_ms="abc"), "times_ms"),
        report_bad("status_number", case_with(status=5), "status"),
        report_bad("meta_null", results(meta=None), "meta"),
        report_bad("mode_contradicts_id", case_with(mode="bwd"), "mode"),
        report_bad("provider_contradicts_id", case_with(provider="reference"), "provider"),
        report_bad("not_utf8", b"\xff\xfe{}", "UTF-8"),
        compare_bad("mode_contradicts_id", case_with(mode="bwd"), "mode"),
        compare_bad("provider_contradicts_id", case_with(provider="gdpa"), "provider"),
        compare_bad("mode_unknown", case_with(mode="sideways"), "mode"),
        compare_bad("provider_not_text", case_with(provider=5), "provider"),
        compare_bad("median_overflows_to_infinity", case_with(median_ms=1e400), "median_ms"),
    ],
    "multi-GPU plans": [
        merge_bad("plan_not_json", "{not json", "not valid JSON"),
        merge_bad("plan_sources_5", {"schema": "gdpa-bench-multigpu/1", "sources": 5}, "sources"),
        merge_bad("plan_source_without_dir", {"sources": [{"gpu_index": 0}]}, "sources[0]"),
        merge_bad("plan_source_dir_escapes", {"sources": [{"dir": "../../etc"}]}, "dir"),
        merge_bad("plan_source_dir_absolute", {"sources": [{"dir": "/etc"}]}, "dir"),
        merge_bad("plan_source_cases_not_a_list", {"sources": [{"dir": "s", "cases": "abc"}]}, "cases"),
        merge_bad("plan_source_gpu_index_text", {"sources": [{"dir": "s", "gpu_index": "zero"}]}, "gpu_index"),
        merge_bad("plan_is_a_list", "[1, 2]", "plan"),
        merge_bad("plan_cases_not_ids", {"cases": [1, 2], "sources": []}, "cases"),
    ],
    "config values that were accepted": [
        run_cfg("peak_tflops_negative", cfg(hardware={"peak_tflops": {"bf16": -5}}), needle="peak_tflops"),
        run_cfg("peak_tflops_zero", cfg(hardware={"peak_tflops": {"fp32": 0}}), needle="peak_tflops"),
        run_cfg("power_cap_1e9", cfg(hardware={"power_cap_w": 1e9}), needle="power_cap_w"),
        run_cfg("hbm_zero", cfg(hardware={"hbm_tb_s": 0}), needle="hbm_tb_s"),
        run_cfg("max_check_seqs_huge", cfg(correctness={"max_check_seqs": 2**40}), needle="max_check_seqs"),
        run_cfg("label_with_space", cfg(providers=[{"name": "naive_eager", "label": "a b"}]), needle="label"),
        run_cfg("top_field_typo_suggests", cfg(timng={"rep_ms": 2}), needle="did you mean 'timing'"),
        run_cfg("set_field_typo_suggests", cfg_set(max_lne=8), needle="did you mean 'max_len'"),
        run_cfg("provider_typo_suggests", cfg(providers=["naive_eagr"]), needle="did you mean 'naive_eager'"),
        run_cfg(
            "family_typo_suggests",
            cfg_set(lengths={"family": "unifrom_fill", "fill": 0.5}),
            needle="did you mean 'uniform_fill'",
        ),
        run_cfg("activation_typo_suggests", cfg_set(activation="fast_gleu"), needle="did you mean 'fast_gelu'"),
        run_cfg("pairing_typo_suggests", cfg_set(kv={"rule": "fixed_k"}), needle="did you mean 'fixed_kv'"),
        run_cfg(
            "preset_typo_suggests", cfg_set(lengths={"family": "lognormal", "preset": "ml-20"}), needle="did you mean"
        ),
        run_cfg(
            "providers_option_typo_suggests", BASE, "--providers", "naive_eagre", needle="did you mean 'naive_eager'"
        ),
        run_cfg("baseline_typo_suggests", cfg(baseline="naive_eagr"), needle="did you mean 'naive_eager'"),
        run_cfg(
            "yaml_date_as_name",
            "name: 2024-01-01\n" + yaml.safe_dump({k: v for k, v in BASE.items() if k != "name"}),
            needle="date",
        ),
        run_cfg("yaml_binary_value", yaml.safe_dump(BASE, sort_keys=False) + "x: !!binary aGVsbG8=\n", needle="bytes"),
        run_cfg("yaml_set_value", yaml.safe_dump(BASE, sort_keys=False) + "x: !!set {a: null}\n", needle="a set value"),
    ],
}
BAD += [b for group in HOSTILE.values() for b in group]

# found by a review of the CLI (2026-12-04): inputs that got a traceback, exit 0 or a misleading line
OTHER_WORK = results()
OTHER_WORK["cases"][0]["workload"] = {"B": 8, "lengths_sha256": "b" * 64}
BASE_WORK = results()
BASE_WORK["cases"][0]["workload"] = {"B": 4, "lengths_sha256": "a" * 64}
BAD += [
    Bad(
        "list_only_overflowing_regex",
        ("list", "cfg.yaml", "--only", "a{99999999999}"),
        "OverflowError",
        {"cfg.yaml": BASE},
    ),
    Bad(
        "list_only_nested_regex",
        ("list", "cfg.yaml", "--only", "(" * 3000 + ")" * 3000),
        "RecursionError",
        {"cfg.yaml": BASE},
    ),
    Bad(
        "table_bad_mode",
        ("table", "run", "--modes", "fwd,bwdd"),
        "--modes bwdd",
        {"run": DIR, "run/results.json": GOOD_RUN},
    ),
    Bad(
        "table_only_matching_nothing",
        ("table", "run", "--only", "zzz"),
        "--only zzz: matches no case",
        {"run": DIR, "run/results.json": GOOD_RUN},
    ),
    Bad(
        "table_duplicate_ids",
        ("table", "run"),
        "run/results.json",
        {"run": DIR, "run/results.json": json.dumps(results(cases=results()["cases"] * 2))},
    ),
    Bad(
        "power_checks_duplicate_ids",
        ("power-checks", "run"),
        "run/results.json",
        {"run": DIR, "run/results.json": json.dumps(results(cases=results()["cases"] * 2))},
    ),
    report_bad("meta_gpu_a_number", results(meta={"gpu": 7}), "meta.gpu"),
    run_cfg(
        "yaml_off_as_activation",
        yaml.safe_dump(BASE, sort_keys=False).replace("dtype: fp32", "dtype: fp32\n  activation: off"),
        needle="sets.s.activation: read as the boolean False",
    ),
    run_cfg("union_member_not_a_field", cfg_set(max_len="x"), needle="sets.s.max_len: "),
    Bad(
        "resume_a_file", ("run", "cfg.yaml", "--resume", "cfg.yaml"), "--resume cfg.yaml: is a file", {"cfg.yaml": BASE}
    ),
    Bad(
        "history_report_out_a_file",
        ("history", "report", "--store", str(ROOT / "docs" / "example-history"), "--out", "cfg.yaml"),
        "--out cfg.yaml: is a file; allowed: a folder",
        {"cfg.yaml": BASE},
    ),
    Bad(
        "providers_registered_but_not_in_the_config",
        ("list", "cfg.yaml", "--providers", "naive_compiled"),
        "unknown provider 'naive_compiled' (a registered provider, but not one of this config's); allowed: naive_eager",
        {"cfg.yaml": BASE},
    ),
    Bad(
        "submit_out_holding_a_run",
        ("submit", "cfg.yaml", "--local", "--nodes", "1", "--gpus-per-node", "1", "--out", "prev"),
        "--out prev: already holds a run; choose another folder",  # submit has no --resume to offer
        {"cfg.yaml": BASE, "prev": DIR, "prev/results.json": GOOD_RUN},
    ),
    Bad(
        "compare_another_workload",
        ("compare", "good.json", "bad.json"),
        "workload.B 4 in the baseline, 8 here",
        {"good.json": json.dumps(BASE_WORK), "bad.json": json.dumps(OTHER_WORK)},
    ),
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
    # issue 25: what a real process must show — no hang on a FIFO, no memory kill under MEMORY_CAP, no
    # traceback from a recursion or an integer limit (the in-process inputs have a SIGALRM timeout)
    "config_is_a_fifo",
    "compare_current_is_a_fifo",
    "alias_bomb_as_modes",
    "yaml_50000_deep",
    "report_results_100000_deep",
    "report_results_5001_digit_int",
    "B_1e9",
    "list_B_2_31",
    "list_max_len_2_31",
    "max_len_1e7",
    "H_D_100000",
    "kv_len_1e9",
}


# --------------------------------------------------------------------------------- the Python API


def _cyclic() -> dict:
    c = cfg()
    c["sets"][0]["lengths"]["again"] = c["sets"][0]["lengths"]
    return c


def _shared_bomb() -> list:
    x: list = ["lol"] * 9
    for _ in range(8):
        x = [x] * 9  # 9**9 values through shared references, a few hundred objects in memory
    return x


def _deep_dict(n: int = 10_000) -> dict:
    d: dict = {}
    cur = d
    for _ in range(n):
        cur["k"] = {}
        cur = cur["k"]
    return d


# (id, config, keyword arguments, needle): `bench.run(config, **kw)` raises a ValueError (ConfigError or
# UsageError) whose message is one line holding the needle, and writes nothing
API_BAD: list[tuple[str, object, dict, str]] = [
    ("config_none", None, {}, "config"),
    ("config_int", 123, {}, "config"),
    ("config_list_of_a_path", ["cfg.yaml"], {}, "config"),
    ("config_bytes", b"cfg.yaml", {}, "config"),
    ("config_missing_file", "nope.yaml", {}, "nope.yaml"),
    ("dict_int_key", {**BASE, 1: 2}, {}, "key 1"),
    ("dict_cycle", _cyclic(), {}, "cycle"),
    # numpy integers, floats and bools are their Python values (tests/test_hostile_inputs.py); the rest is not
    ("dict_numpy_array_max_len", cfg_set(max_len=np.array([8, 16])), {}, "numpy"),
    ("dict_numpy_complex_alpha", cfg_set(alpha=np.complex64(1.0)), {}, "numpy"),
    ("dict_numpy_datetime_seed", cfg_set(seed=np.datetime64("2026-01-01")), {}, "numpy"),
    ("dict_numpy_int_B_of_zero", cfg_set(B=np.int64(0)), {}, "B"),
    ("dict_set_value", cfg_set(seed={1, 2}), {}, "set"),
    ("dict_bytes_value", cfg(name=b"x"), {}, "bytes"),
    ("dict_object_value", cfg(description=object()), {}, "object"),
    ("dict_2_70_int", cfg_set(B=2**70), {}, "digits"),
    ("dict_shared_reference_bomb", cfg(description=_shared_bomb()), {}, "100,000"),
    ("dict_10000_deep", cfg(hardware=_deep_dict()), {}, "nested"),
    ("dict_seed_2_64", cfg_set(seed=2**64 - 1), {}, "seed"),
    ("dict_empty_sweep", cfg_set(max_len=[]), {}, "max_len"),
    ("only_int", BASE, {"only": 5}, "only"),
    ("only_list", BASE, {"only": ["s/"]}, "only"),
    ("only_not_a_regex", BASE, {"only": "("}, "only="),
    ("providers_int", BASE, {"providers": 5}, "providers"),
    ("providers_list_of_int", BASE, {"providers": [1]}, "providers"),
    ("providers_unknown", BASE, {"providers": ["naive_eagr"]}, "did you mean"),
    ("device_list", BASE, {"device": [0]}, "device"),
    ("device_float", BASE, {"device": 1.7}, "device"),
    ("device_bool", BASE, {"device": True}, "device"),
    ("device_tpu", BASE, {"device": "tpu"}, "device"),
    ("device_index_on_a_cpu_config", BASE, {"device": 3}, "device: cpu"),
    ("out_int", BASE, {"out": 5}, "out"),
    ("out_empty", BASE, {"out": ""}, "out"),
    ("out_with_nul", BASE, {"out": "a\0b"}, "NUL"),
    ("out_over_name_max", BASE, {"out": LONG}, "255"),
    ("resume_empty", BASE, {"resume": ""}, "resume"),
    ("resume_missing_folder", BASE, {"resume": "nope"}, "nope"),
    ("out_and_resume", BASE, {"out": "a", "resume": "b"}, "resume"),
    ("force_text", BASE, {"force": "yes"}, "force"),
    ("progress_int", BASE, {"progress": 1}, "progress"),
    ("memory_no_case_fits", cfg_set(H=100_000, D=100_000), {}, "no selected case fits"),
]


@pytest.mark.parametrize(("config", "kw", "needle"), [pytest.param(*x[1:], id=x[0]) for x in API_BAD])
def test_bad_api_input(config, kw, needle, tmp_path, monkeypatch):
    import bench

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as exc:
        bench.run(config, **kw)
    msg = str(exc.value)
    assert "\n" not in msg and needle in msg, msg
    assert len(msg) < 1000
    assert list(tmp_path.iterdir()) == []  # nothing written


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


IN_PROCESS_TIMEOUT_S = 120
MEMORY_CAP = 8 * 2**30  # issue 25: every input under an 8 GiB address-space limit, none killed for memory


def _memory_cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


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
            preexec_fn=_memory_cap,
        )
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = None, str(e.stdout or ""), f"timed out after {TIMEOUT_S} s"
    return Outcome(rc, out, err, sorted(_tree(folder) - before))


def _run_here(bad: Bad, folder: Path, monkeypatch, capsys) -> Outcome:
    """`bench.cli.parser.main(argv)` in this process, in `folder`: an exception that escapes main is the
    traceback `python -m bench` would print."""
    _materialise(folder, bad.files)
    before = _tree(folder)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("GDPA_BENCH_PROVIDERS", raising=False)
    for k, v in bad.env.items():
        monkeypatch.setenv(k, v)
    capsys.readouterr()
    tb = ""

    def hung(signum, frame):  # no hang: an input that blocks (a FIFO opened for reading) fails the test
        raise TimeoutError(f"{bad.id}: still running after {IN_PROCESS_TIMEOUT_S} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(IN_PROCESS_TIMEOUT_S)
    try:
        rc = main(list(bad.argv))
    except SystemExit as e:  # what `python -m bench` would exit with
        rc = e.code
    except BaseException:
        rc, tb = None, traceback.format_exc()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
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
    assert len(ids) + len(API_BAD) >= 250
    assert all(len(group) >= 5 for group in HOSTILE.values()), {k: len(v) for k, v in HOSTILE.items()}
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

    from bench.config.models import load_config

    w = load_config(cfg_path).cases[0].workload
    assert w.family_params["path"] == str(tmp_path / "project" / "lengths.txt")
    assert set(w.lengths()[0]) <= {3, 5, 7}  # drawn from the file
    assert [c.id for c in load_config(cfg_path).cases] == ["s/fwd/L=8/naive_eager"]  # ids keep what was written


def test_an_unreadable_config_is_one_line(tmp_path, monkeypatch, capsys):
    """PermissionError (which root never meets with chmod, hence the stand-in) is one line, exit 2."""
    import support.inputs

    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(BASE))
    real_open = os.open

    def denied(path, *a, **k):
        if str(path).endswith("cfg.yaml"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(support.inputs.os, "open", denied)
    o = _run_here(
        Bad("unreadable", ("run", str(tmp_path / "cfg.yaml")), "Permission denied"),
        tmp_path / "cwd",
        monkeypatch,
        capsys,
    )
    _check(Bad("unreadable", (), "Permission denied"), o)
