"""The tree stays small (issue 32): a fresh clone and every copy of the tree carry at most 10 MB of tracked
files. Committed example runs keep what a reader opens on the web (report.md, the plots as palette PNGs,
results.json, logs); `gdpa-bench report DIR` writes the rest again. A run folder may keep its power
timeline gzip-compressed (power.csv.gz): its readers read it as power.csv."""

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
