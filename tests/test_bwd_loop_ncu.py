"""docs/experiments/bwd_loop_ncu.py reads ncu's per-instruction source page: its step never ran to the end on
the GPU (2026-12-06b: the trailing comma), so the parsing is checked here, on a page of that run and on the
plain format, before the next session spends device time on it."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bwd_loop_ncu", ROOT / "docs" / "experiments" / "bwd_loop_ncu.py")
ncu_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ncu_script)


def test_the_source_page_of_the_h100_run_parses():
    page = ROOT / "docs/experiments/h100-2026-12-06b/bwd_loop_sass_gdpa_hopper.top300.csv.gz"
    rows, stall = ncu_script.source_rows(gzip.open(page, "rt").read())
    assert stall == "Warp Stall Sampling (All Samples)" and len(rows) == 300
    first = rows[0]
    assert first["Source"] == "LDC R1, c[0x0][0x28]" and first[stall] == "240"
    assert any(r["Source"].startswith("HGMMA.64x64x16.F32.BF16") for r in rows)


def test_ncus_plain_page_with_its_trailing_commas_parses():
    page = "\n".join(
        [
            '"Kernel Name","kernel_cutlass_FlashAttentionBackwardSm90_0",',
            '"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",',
            '"0x7f00","MUFU.EX2 R4, R4","1,234","1,000",',
            '"0x7f10","@P1 BRA 0x7f00","56","50",',
            "==PROF== a line that is not the page's",
        ]
    )
    rows, stall = ncu_script.source_rows(page)
    assert stall == "Warp Stall Sampling (All Samples)"
    assert [r["Source"] for r in rows] == ["MUFU.EX2 R4, R4", "@P1 BRA 0x7f00"] and rows[0][stall] == "1,234"
    assert ncu_script.source_rows("no page: ncu said nothing") == ([], None)


def test_the_shape_options_reach_the_profiled_child_and_bad_ones_get_one_line(monkeypatch, tmp_path, capsys):
    """`--batch 2048 --length 128` (the walk's key-tile cost) must profile that batch, not the default one: the
    options travel on the child's command line; a non-positive one is argparse's one line and exit 2."""
    import subprocess
    import sys

    import pytest

    seen = []

    class Failed:
        returncode, stdout, stderr = 3, "", "stopped here"

    monkeypatch.setattr(ncu_script.shutil, "which", lambda _: "/usr/bin/ncu")
    monkeypatch.setattr(subprocess, "run", lambda cmd, **_: seen.append(cmd) or Failed())
    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["bwd_loop_ncu.py", "--batch", "2048", "--length", "128"])
    assert ncu_script.main() == 3
    child = seen[0][seen[0].index("--child") :]
    assert child == ["--child", "--batch", "2048", "--length", "128"]

    monkeypatch.setattr(sys, "argv", ["bwd_loop_ncu.py", "--length", "0"])
    with pytest.raises(SystemExit) as stop:
        ncu_script.main()
    assert stop.value.code == 2 and "--length 0" in capsys.readouterr().err
