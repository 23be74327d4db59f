"""Small PNGs for good: a figure's PNG rewritten as an 8-bit palette image (docs/DESIGN.md §2).

A plot has a few dozen flat colours plus their anti-aliased edges; 256 palette entries (octree, without
dithering: no channel off by more than a few levels on the lines and text) draw it as the eye sees it at
a quarter of the RGBA file, so every run folder and every copy of the tree stays small (the committed
example runs' plots: 6.7 MB before, at 110 dpi in RGBA).
Pillow comes with Matplotlib; where it is missing the PNG stays as Matplotlib wrote it.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

#: Palette entries of a compact PNG: every plot colour and enough edge shades to keep text smooth.
PALETTE_COLORS = 256


def compact_png(data: bytes) -> bytes:
    """The PNG `data` as an optimised 8-bit palette PNG (the input unchanged when Pillow is missing or the
    palette one would not be smaller)."""
    try:
        from PIL import Image  # noqa: PLC0415 (optional: Matplotlib's dependency, not the project's)
    except ImportError:
        return data
    with Image.open(io.BytesIO(data)) as im:
        rgb = im.convert("RGB")
    pal = rgb.quantize(colors=PALETTE_COLORS, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    buf = io.BytesIO()
    pal.save(buf, format="PNG", optimize=True)
    out = buf.getvalue()
    return out if len(out) < len(data) else data


def save_compact_png(fig, path: str | os.PathLike, **savefig: object) -> Path:
    """`fig.savefig` to `path` as a compact PNG (`compact_png`); `savefig` passes dpi, facecolor..."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", **savefig)
    path = Path(path)
    path.write_bytes(compact_png(buf.getvalue()))
    return path
