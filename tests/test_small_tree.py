"""The tree stays small (issue 32): a fresh clone and every copy of the tree carry at most 10 MB of tracked
files. Committed example runs keep what a reader opens on the web (report.md, the plots as palette PNGs,
results.json, logs); `gdpa-bench report DIR` writes the rest again. A run folder may keep its power
timeline and its results gzip-compressed (power.csv.gz, results.json.gz): their readers read them as
power.csv and results.json."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from results.power_csv import power_file, read_power
from results.verdicts import timeline_clocks
from support.png import compact_png

ROOT = Path(__file__).resolve().parents[1]
MAX_TRACKED_BYTES = 10_000_000


def test_the_tracked_tree_is_at_most_10_mb():
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"not a git checkout: {exc}")
    files = [ROOT / f for f in out.stdout.decode().split("\0") if f]
    sizes = {f: f.stat().st_size for f in files if f.is_file()}
    total = sum(sizes.values())
    top = sorted(sizes.items(), key=lambda x: -x[1])[:5]
    biggest = ", ".join(f"{p.relative_to(ROOT)} {n / 1e6:.1f} MB" for p, n in top)
    assert total <= MAX_TRACKED_BYTES, f"tracked files weigh {total / 1e6:.1f} MB (> 10 MB); the largest: {biggest}"


def _timeline(folder: Path) -> None:
    rows = ["time_s,gpu_index,power_w,sm_clock_mhz,mem_clock_mhz,temperature_c,reasons,case_id"]
    rows += [f"{i * 0.01:.2f},0,{600 + i},{1900 + i % 3},3201,60,sw_power_cap,s/fwd/a" for i in range(20)]
    (folder / "power.csv").write_text("\n".join(rows) + "\n")


def test_power_csv_gz_reads_as_power_csv(tmp_path):
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    plain.mkdir()
    _timeline(plain)
    shutil.copytree(plain, packed)
    with (packed / "power.csv").open("rb") as src, gzip.open(packed / "power.csv.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    (packed / "power.csv").unlink()
    assert power_file(packed) == packed / "power.csv.gz" == power_file(packed / "results.json")
    pd.testing.assert_frame_equal(read_power(packed), read_power(plain))
    assert timeline_clocks(packed) == timeline_clocks(plain) == {"s/fwd/a": 1901.0}
    (packed / "power.csv.gz").write_bytes(gzip.compress(b"time_s,gpu_index\n0.1,0\n")[:-9])  # truncated
    assert read_power(packed).empty and power_file(tmp_path) is None and read_power(tmp_path) is None


def test_committed_example_plots_are_palette_pngs():
    pngs = sorted(ROOT.glob("docs/example-*/plots/*.png"))
    if not pngs:
        pytest.skip("no committed example run")
    for p in pngs:
        data = p.read_bytes()
        palette = data[25] == 3  # the IHDR colour type
        assert palette or compact_png(data) == data, f"{p.relative_to(ROOT)}: not a palette PNG"


def test_a_gzipped_results_json_reads_as_the_results_json(tmp_path, capsys):
    """A committed example run may keep results.json gzipped (it is most of such a run's bytes): report,
    table and the history read the folder as they read the plain one; a folder with both reads the plain
    file; a broken or oversized gzip is one line."""
    from bench.cli.parser import main
    from results.files import ResultsError, read_results, results_path
    from results.history_store import read_run

    plain, packed = tmp_path / "plain", tmp_path / "packed"
    shutil.copytree(ROOT / "tests" / "fixtures" / "run_h200", plain)
    shutil.copytree(plain, packed)
    with (packed / "results.json").open("rb") as src, gzip.open(packed / "results.json.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    (packed / "results.json").unlink()
    assert results_path(packed) == packed / "results.json.gz" and results_path(plain) == plain / "results.json"
    assert read_results(packed) == read_results(plain)
    assert read_run(packed)[0]["run_id"] == read_run(plain)[0]["run_id"]
    tables = []
    for folder in (plain, packed):
        assert main(["table", str(folder)]) == 0
        tables.append(capsys.readouterr().out)
    assert tables[0].count("|") > 10 and tables[0] == tables[1]
    assert main(["report", str(packed)]) == 0 and (packed / "report.md").exists()
    (packed / "results.json.gz").write_bytes(b"not gzip")
    with pytest.raises(ResultsError, match=r"results\.json\.gz: not gzip .*; allowed: a results.json, or it gzipped"):
        read_results(packed)
    import results.files as files

    (packed / "results.json.gz").write_bytes(gzip.compress(b" " * 4096))
    original = files.MAX_RESULTS_BYTES
    files.MAX_RESULTS_BYTES = 1024
    try:
        with pytest.raises(ResultsError, match="decompresses past"):
            read_results(packed)
    finally:
        files.MAX_RESULTS_BYTES = original
