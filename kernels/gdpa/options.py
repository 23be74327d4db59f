"""Options of the GDPA op: which backend runs it and which tiles each Triton kernel launches with.

    from kernels.gdpa import GDPAOptions, gdpa
    out = gdpa(q, k, v, q_offsets, kv_offsets, max_q, max_kv,
               options=GDPAOptions(backend="triton", fwd_tiles=(128, 64, 8, 3)))

A harness config names the same options per provider entry (kernels/gdpa/provider.py):

    providers:
      - {name: gdpa_triton, label: fwd_128x64x8x3, options: {fwd_tiles: [128, 64, 8, 3]}}

Tiles are spelt as kernels/gdpa/tiles.py spells them: (BLOCK_M, BLOCK_N, num_warps, num_stages[, maxnreg]);
None (the default) lets the autotuner pick among the kernel's configs. This package reads no environment
variable: every choice is one of these options or follows from the hardware.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from kernels.gdpa import backends
from kernels.gdpa.plan import parse_plan

BACKENDS = ("auto", *backends.NAMES)
TILE_OPTIONS = ("fwd_tiles", "dkdv_tiles", "dq_tiles")
PLAN_OPTIONS = ("fwd_plan", "bwd_plan")
TILES_SPELLING = "[BLOCK_M, BLOCK_N, num_warps, num_stages(, maxnreg)]"

Tiles = tuple  # (BLOCK_M, BLOCK_N, num_warps, num_stages) or with maxnreg as a fifth value


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def parse_tiles(name: str, value: Any) -> Tiles | None:
    """`value` as a tile tuple, or ValueError with one line naming option `name`."""
    if value is None:
        return None
    ok = (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and len(value) in (4, 5)
        and all(isinstance(x, int) and not isinstance(x, bool) for x in value)
    )
    if not ok:
        raise ValueError(f"{name}: expected {TILES_SPELLING} integers, got {value!r}")
    m, n, warps, stages = value[:4]
    if not (_power_of_two(m) and _power_of_two(n) and m >= 16 and n >= 16):
        raise ValueError(f"{name}: BLOCK_M and BLOCK_N must be powers of two >= 16 (tl.dot), got {list(value)}")
    if not (_power_of_two(warps) and warps <= 16):
        raise ValueError(f"{name}: num_warps must be 1, 2, 4, 8 or 16, got {warps}")
    if stages < 1:
        raise ValueError(f"{name}: num_stages must be >= 1, got {stages}")
    if len(value) == 5 and value[4] < 0:
        raise ValueError(f"{name}: maxnreg must be >= 0 (0 = no register cap), got {value[4]}")
    return tuple(value)


@dataclass(frozen=True)
class GDPAOptions:
    """backend: "auto" (the default; per call and per length band, the backend the measured table in
    backends.py prefers where it can run, else Triton — the plan and its reasons go to `record`), or one
    backend of backends.NAMES ("packed": sequences of <= 128 tokens several to a tile, Triton above; "hopper";
    "triton") for the whole call (an error where it cannot run, never a silent fallback).
    fwd_tiles / dkdv_tiles / dq_tiles: pinned tiles of the Triton forward, dK/dV and dQ kernels; None
    autotunes. A causal forward needs BLOCK_M to be a multiple of BLOCK_N (checked at the call).
    fwd_plan / bwd_plan: pin the launches of a pass, [[backend, lo, hi], ...] over bands of min(Lq, Lk)
    that partition [0, inf) (plan.py); None lets `backend` decide.
    concurrent_stages: a plan of several launches runs them at once, each on a CUDA stream of its own joined
    back to the caller's (concurrent.py: their tails overlap); False: one after the other on the caller's."""

    backend: str = "auto"
    fwd_tiles: Tiles | None = None
    dkdv_tiles: Tiles | None = None
    dq_tiles: Tiles | None = None
    fwd_plan: tuple | None = None
    bwd_plan: tuple | None = None
    concurrent_stages: bool = True

    def __post_init__(self):
        if not isinstance(self.concurrent_stages, bool):
            raise ValueError(f"concurrent_stages: expected true or false, got {self.concurrent_stages!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {', '.join(BACKENDS)}, got {self.backend!r}")
        for name in TILE_OPTIONS:
            object.__setattr__(self, name, parse_tiles(name, getattr(self, name)))
        for name in PLAN_OPTIONS:
            object.__setattr__(self, name, parse_plan(name, getattr(self, name)))
            if getattr(self, name) is not None and self.backend != "auto":
                raise ValueError(f"{name}: pins the backends itself; leave backend at 'auto' (got {self.backend!r})")

    @classmethod
    def allowed(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_dict(cls, options: Mapping[str, Any]) -> GDPAOptions:
        """Options from a config mapping; ValueError with one line naming the bad key and what is allowed."""
        if not isinstance(options, Mapping):
            raise ValueError(
                f"options: expected a mapping with keys {', '.join(cls.allowed())}, got {type(options).__name__}"
            )
        for key in options:
            if key not in cls.allowed():
                raise ValueError(f"unknown option {key!r}; allowed: {', '.join(cls.allowed())}")
        return cls(**options)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (tiles and plans as lists), what a results file records."""

        def plain(v):
            return [plain(x) for x in v] if isinstance(v, tuple) else v

        return {f.name: plain(getattr(self, f.name)) for f in fields(self)}

    def merged(self, options: Mapping[str, Any]) -> GDPAOptions:
        """These options with `options` (a config mapping) laid over them."""
        if not isinstance(options, Mapping):
            return GDPAOptions.from_dict(options)  # raises the one-line error
        return GDPAOptions.from_dict({**self.to_dict(), **options})
