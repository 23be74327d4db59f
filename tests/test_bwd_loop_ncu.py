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
