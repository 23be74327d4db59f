"""results.files and results.power_csv: flattening, the files, and the power-timeline stitching rule."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from results.files import SCHEMA, ResultsError, ResultsWriter, atomic_write, csv_frame, flatten_case, read_results
from results.power_csv import (
    POWER_COLUMNS,
    TIMELINE_GAP_S,
    PowerTimeline,
    append_timeline,
    power_csv_text,
    read_power,
)


def frame(rows):
    text = power_csv_text([dict(zip(POWER_COLUMNS, r, strict=True)) for r in rows])
    return pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)


def test_timeline_segments_start_one_gap_after_each_gpus_last_sample():
    old = frame(
        [
            (0.0, 0, 100.0, 1, 1, 40, [], "a"),
            (2.0, 0, 100.0, 1, 1, 40, [], "a"),
            (0.0, 1, 100.0, 1, 1, 40, [], "b"),
            (5.0, 1, 100.0, 1, 1, 40, ["sw_power_cap"], "b"),
        ]
    )
    new = frame(
        [
            (0.0, 0, 200.0, 1, 1, 40, [], "c"),
            (0.5, 0, 200.0, 1, 1, 40, [], "c"),
            (0.25, 2, 300.0, None, None, None, None, "d"),
        ]
    )
    out = append_timeline(old, new)
    t = out["time_s"].astype(float).tolist()
    assert t[:4] == [0.0, 2.0, 0.0, 5.0]
    assert t[4:] == [2.0 + TIMELINE_GAP_S, 2.5 + TIMELINE_GAP_S, 0.25]  # gpu 2 has nothing before: unshifted
    assert out["gpu_index"].tolist() == ["0", "0", "1", "1", "0", "0", "2"]
    relabelled = append_timeline(old, new, gpu_index=1)  # a shard's rows under its GPU label
    assert relabelled["gpu_index"].tolist()[4:] == ["1", "1", "1"]
    assert relabelled["time_s"].astype(float).tolist()[4:] == [6.0, 6.5, 6.25]
    first = append_timeline(None, new)
    assert first["time_s"].astype(float).tolist() == [0.0, 0.5, 0.25]
    assert list(out.columns) == list(POWER_COLUMNS)


def _samples(times, case, gpu=0):
    return [dict(zip(POWER_COLUMNS, (t, gpu, 500.0, 1755, 3201, 60, [], case), strict=True)) for t in times]


def test_the_timeline_appends_each_cases_samples_and_keeps_one_header(tmp_path):
    path = tmp_path / "power.csv"
    path.write_text("time_s,gpu_index\n9.0,0\n")  # not a resume: an old file is started afresh
    timeline = PowerTimeline(path, resume=False)
    timeline.append([])
    assert path.read_text() == "time_s,gpu_index\n9.0,0\n"  # nothing to write writes nothing
    timeline.append(_samples([0.0, 0.1], "a"))
    timeline.append(_samples([0.2], "b,with a comma"))
    assert timeline.appended == 3
    assert path.read_text().count("time_s") == 1
    df = read_power(path)
    assert df["time_s"].tolist() == [0.0, 0.1, 0.2]
    assert df["case_id"].tolist() == ["a", "a", "b,with a comma"]


def test_a_resumed_timeline_starts_one_gap_after_the_file_and_cuts_a_half_written_row(tmp_path):
    path = tmp_path / "power.csv"
    PowerTimeline(path, resume=False).append(_samples([0.0, 2.0], "a"))
    with open(path, "a") as f:
        f.write("2.5,0,51")  # a process killed in the middle of a row
    resumed = PowerTimeline(path, resume=True)
    resumed.append(_samples([0.0, 0.5], "b"))
    resumed.append(_samples([1.0], "c"))  # every segment of one process keeps the same offset
    df = read_power(path)
    assert df["time_s"].tolist() == [0.0, 2.0, 2.0 + TIMELINE_GAP_S, 2.5 + TIMELINE_GAP_S, 3.0 + TIMELINE_GAP_S]
    assert df["case_id"].tolist() == ["a", "a", "b", "b", "c"]
    assert len(path.read_text().splitlines()) == 6  # the header and five whole rows


def test_a_timeline_that_cannot_be_written_is_one_line_naming_the_file(tmp_path):
    from results.files import ResultsWriteError

    path = tmp_path / "gone" / "power.csv"
    with pytest.raises(ResultsWriteError, match=r"power\.csv"):
        PowerTimeline(path, resume=False).append(_samples([0.0], "a"))


def test_power_csv_round_trip(tmp_path):
    samples = [
        {
            "time_s": 0.5,
            "gpu_index": 0,
            "power_w": 690.0,
            "sm_clock_mhz": 1755,
            "mem_clock_mhz": None,
            "temperature_c": 61,
            "reasons": ["sw_power_cap", "hw_thermal"],
            "case_id": "s/fwd/L=8,odd/p",
        }
    ]
    atomic_write(tmp_path / "power.csv", power_csv_text(samples))
    df = read_power(tmp_path)
    assert df.loc[0, "reasons"] == "sw_power_cap|hw_thermal" and df.loc[0, "case_id"] == "s/fwd/L=8,odd/p"
    assert df.loc[0, "power_w"] == 690.0 and pd.isna(df.loc[0, "mem_clock_mhz"])
    assert not list(tmp_path.glob(".*.tmp"))


def test_flatten_and_csv_frame():
    case = {
        "id": "a",
        "times_ms": [1.0, 2.0],
        "power": {"avg_w": 5.0, "reasons": ["x", "y"]},
        "workload": {"params": {"fill": 0.5}},
        "error": None,
        "sweep": {},
    }
    row = flatten_case(case)
    assert row["power.avg_w"] == 5.0 and row["workload.params.fill"] == 0.5 and row["times_ms"] == [1.0, 2.0]
    df = csv_frame([case, {"id": "b", "times_ms": [], "power": None, "error": None}])
    assert list(df.columns[:2]) == ["id", "n_samples"] and df["n_samples"].tolist() == [2, 0]
    assert df.loc[0, "power.reasons"] == "x|y" and "error" not in df.columns  # null in every row


def test_writer_of_and_read_results(tmp_path):
    data = {"schema": SCHEMA, "meta": {"x": 1}, "workloads": {}, "cases": [{"id": "a", "status": "ok"}]}
    w = ResultsWriter.of(tmp_path, data)
    w.update_cases({"a": {"tc_util_ncu": 0.5}})
    back = read_results(tmp_path)
    assert back["cases"] == [{"id": "a", "status": "ok", "tc_util_ncu": 0.5}] and "resumed_at" not in back["meta"]
    (tmp_path / "results.json").write_text(json.dumps({"schema": "other"}))
    with pytest.raises(ResultsError, match="schema is 'other'"):
        read_results(tmp_path)


def test_results_json_is_one_line_per_case_with_samples_to_six_digits():
    from results.files import SAMPLE_DIGITS, results_json_text

    data = {
        "schema": "gdpa-bench/1",
        "meta": {"gpu": "x", "peak": float("nan")},
        "workloads": {"a/L=8": {"q_lengths": [1, 2]}, "b/L=8": {"q_lengths": [3]}},
        "cases": [{"id": "a", "times_ms": [0.3351039886474609, 18.38755226135254, 2]}, {"id": "b", "times_ms": None}],
    }
    text = results_json_text(data)
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1] == "}" and len(lines) == 12  # 4 fields, 2 workloads, 2 cases, brackets
    assert lines.index('"cases":[') == 7 and lines[8].startswith('{"id":"a"') and lines[9].startswith('{"id":"b"')
    back = json.loads(text)
    assert back["meta"]["peak"] is None  # JSON has no NaN
    assert back["cases"][0]["times_ms"] == [0.335104, 18.3876, 2] and SAMPLE_DIGITS == 6
    assert back["cases"][1] == {"id": "b", "times_ms": None} and back["workloads"] == data["workloads"]
    assert json.loads(results_json_text({"schema": "s", "meta": {}, "workloads": {}, "cases": []}))["cases"] == []


def test_a_resumed_writer_adds_a_session_only_for_another_machine_or_commit(tmp_path):
    meta = {"started_at": "t0", "host": "a", "gpu": "H200", "gpu_uuid": "GPU-1", "driver": "580", "git_sha": "abc"}
    ResultsWriter(tmp_path, meta).add_case({"id": "x", "status": "ok"})
    # a worker of a provider's own environment on the same machine: the fields it does not know are None
    w = ResultsWriter(tmp_path, {**meta, "started_at": "t1", "driver": None}, read_results(tmp_path))
    w.add_case({"id": "y", "status": "ok"})
    assert w.session is None and "sessions" not in read_results(tmp_path)["meta"]
    # another GPU, then that GPU again (a second leg of the resumed run)
    for started in ("t2", "t3"):
        w = ResultsWriter(tmp_path, {**meta, "started_at": started, "gpu_uuid": "GPU-2"}, read_results(tmp_path))
        w.add_case({"id": f"z{started}", "status": "ok"})
    data = read_results(tmp_path)
    assert [(s["started_at"], s["gpu_uuid"]) for s in data["meta"]["sessions"]] == [("t0", "GPU-1"), ("t2", "GPU-2")]
    assert {c["id"]: c.get("session") for c in data["cases"]} == {"x": None, "y": None, "zt2": 1, "zt3": 1}
    assert data["meta"]["gpu_uuid"] == "GPU-2" and data["meta"]["resumed_at"] == ["t1", "t2", "t3"]
