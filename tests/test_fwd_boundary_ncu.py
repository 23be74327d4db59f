"""docs/experiments/fwd_boundary_ncu.py sorts a kernel's stall samples into the tile boundary's parts by the SASS
opcode each instruction waits at: checked on a recorded source page and on hand-written lines before the next
session spends device time on it."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("fwd_boundary_ncu", ROOT / "docs/experiments/fwd_boundary_ncu.py")
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)


@pytest.mark.parametrize(
    ("line", "part"),
    [
        ("@P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R3+URZ+0x10], R4", "mbarrier wait"),
        ("@!P1 LDG.E R5, desc[UR4][R2.64]", "global load"),
        ("WARPGROUP.DEPBAR.LE gsb0, 0x0", "wgmma wait"),
        ("HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT, gsb0", "wgmma wait"),
        ("BAR.SYNC.DEFER_BLOCKING 0x1, 0x100", "named barrier"),
        ("SHFL.UP PT, R7, R6, 0x1, RZ", "shuffle/vote"),
        ("UTMASTG.2D [UR4], [UR6]", "TMA store"),
        ("MUFU.TANH R1, R2", "MUFU"),
        ("FFMA R3, R2, R2, R1", "FP32 / ALU"),
        ("IMAD.WIDE R2, R3, 0x4, R4", "other"),
        ("", "other"),
    ],
)
def test_each_opcode_lands_in_its_part(line, part):
    assert probe.part_of(line).startswith(part)


def test_a_recorded_page_splits_into_shares_that_add_up():
    page = ROOT / "docs/experiments/h100-2026-12-06b/bwd_loop_sass_gdpa_hopper.top300.csv.gz"
    rows, stall = probe.source_rows(gzip.open(page, "rt").read())
    parts = probe.by_part(rows, stall)
    assert sum(parts.values()) == pytest.approx(1.0)
    assert parts["wgmma wait"] > 0 and list(parts.values()) == sorted(parts.values(), reverse=True)
    hgmma = sum(float(r[stall].replace(",", "")) for r in rows if r["Source"].startswith(("HGMMA", "WARPGROUP")))
    total = sum(float(r[stall].replace(",", "")) for r in rows)
    assert parts["wgmma wait"] == pytest.approx(hgmma / total)
