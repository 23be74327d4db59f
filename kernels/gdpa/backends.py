"""The GDPA backends, one row each: where the code lives and where backend="auto" prefers it.

Every backend module implements one contract (the Triton row: triton_backend.py; Hopper: hopper/__init__.py):

    unavailable(device) -> str | None                      why it cannot run on `device` (None: it can)
    unsupported(call) -> str | None                        host-only checks of one GDPACall (call.py)
    forward(call, band, options, out=None, record=None) -> out
    backward(call, do, band, options, out=None, record=None) -> (dq, dk, dv)

`band` (bands.py) restricts a launch to the sequences whose min(Lq, Lk) lies in it; `out` is written in place,
so the launches of several bands fill one output. Adding a backend = its package + one row below.

A row's `prefer` says, per pass, the length bands where backend="auto" runs it (plan.py): the first row (in
table order) that prefers a band and can run the call gets it; the last row runs everything and takes what
no other row does. A pass a row names, even with no band, makes it one of auto's measured candidates for that
pass (plan.candidates); a pass it does not name, not (a row naming none runs only where pinned). Two bands of
one row are two launches — each gets its own tiles from the autotuner.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from types import ModuleType

import torch

from kernels.gdpa.bands import Band
from kernels.gdpa.call import GDPACall
from support.text import one_line

CONTRACT = ("unavailable", "unsupported", "forward", "backward")
PASSES = ("fwd", "bwd")


@dataclass(frozen=True)
class BackendRow:
    name: str
    module: str
    description: str
    prefer: dict  # pass -> tuple of Bands where auto prefers this backend
    source: str  # where the preference was measured


# Measured on one H200 (kernels/gdpa/PERF.md, "Jagged batches"): see there for every band's figures.
TABLE: tuple[BackendRow, ...] = (
    BackendRow(
        name="packed",
        module="kernels.gdpa.packed",
        description="short sequences several to a block-diagonal tile (kernels/gdpa/packed.py), the rest on Triton",
        prefer={"fwd": (Band(0, 128),), "bwd": (Band(0, 128),)},
        source="measured on H200 (kernels/gdpa/PERF.md, packed short sequences): bwd [0, 128) 1.25x Triton's",
    ),
    BackendRow(
        name="hopper",
        module="kernels.gdpa.hopper",
        description="FA4's warp-specialized sm90 kernels with the GDPA pointwise (kernels/gdpa/hopper)",
        prefer={"fwd": (Band(512),), "bwd": (Band(0),)},
        source="measured on H200, kernels/gdpa/PERF.md",
    ),
    BackendRow(
        name="hopper_persistent",
        module="kernels.gdpa.hopper.persistent_backend",
        description="the Hopper backend with one CTA per SM walking the key tiles in the backward, at any batch",
        prefer={},  # pinned only: the hopper row's backward is this walk up to 2,048 sequences (plans.backward_walks)
        source="measured on H100, kernels/gdpa/PERF.md (the persistent backward, longest first)",
    ),
    BackendRow(
        name="owned",
        module="kernels.gdpa.owned",
        description="backward: one program per short sequence and KV head, no dQ accumulator pass "
        "(kernels/gdpa/owned.py); Triton's kernels elsewhere",
        prefer={"bwd": ()},  # never the table's pick: a backward candidate that auto times (plan.candidates)
        source="written for issue 30, not yet timed (kernels/gdpa/PERF.md, the owned backward)",
    ),
    BackendRow(
        name="triton",
        module="kernels.gdpa.triton_backend",
        description="our Triton kernels (fwd.py, bwd.py): every call the op accepts, any GPU, the CPU interpreter",
        prefer={"fwd": (Band(0),), "bwd": (Band(0),)},
        source="runs every call",
    ),
)
# Two-backend splits backend="auto" also times (plan.candidates): Triton below the edge, Hopper from it up.
# Measured on one H200 with the persistent Hopper forward (PERF.md "The persistent Hopper forward"): the best
# split moves with the length distribution — 512 on log-normal max 2048, 1024 on max 4096 (12% ahead of 512
# there), Hopper alone on short KV and uniform batches — which no host-known fact tells apart.
# The backward's: the owned kernel (no dQ accumulator pass) below the edge, Hopper above — written for issue 30,
# not yet timed (PERF.md "The owned backward").
SPLITS = {  # pass -> (backend below, backend from the edge up, edges)
    "fwd": ("triton", "hopper", (256, 512, 1024)),
    "bwd": ("owned", "hopper", (256, 512)),
}
ROWS = {row.name: row for row in TABLE}
FALLBACK = TABLE[-1].name
NAMES = tuple(ROWS)


@functools.cache
def load(name: str) -> tuple[ModuleType | None, str | None]:
    """(the backend's module, None), or (None, why it cannot be used). Imported once per process; a backend
    that is absent or fails to import is unavailable with that reason, never an error of the op."""
    module_name = ROWS[name].module
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return None, f"the {name} backend is not in this tree ({module_name} missing)"
        return None, f"importing {module_name} failed: {one_line(exc)}"
    except Exception as exc:  # a broken optional backend must not break the op
        return None, f"importing {module_name} failed: {one_line(exc)}"
    missing = [fn for fn in CONTRACT if not callable(getattr(module, fn, None))]
    if missing:
        return None, f"{module_name} lacks {', '.join(missing)}"
    return module, None


def unavailable(name: str, device) -> str | None:
    """None where backend `name` can run on `device`, else why not."""
    module, why = load(name)
    if module is None:
        return why
    try:
        return module.unavailable(torch.device(device))
    except Exception as exc:
        return f"availability check failed: {one_line(exc)}"


def unsupported(name: str, call: GDPACall) -> str | None:
    """None where the (available) backend `name` supports this call, else why not."""
    module, why = load(name)
    if module is None:
        return why
    try:
        return module.unsupported(call)
    except Exception as exc:
        return f"support check failed: {one_line(exc)}"


def cannot_run(name: str, call: GDPACall) -> str | None:
    """Why backend `name` cannot run this call here (unavailable or unsupported), or None."""
    why = unavailable(name, call.q.device)
    if why is not None:
        return f"{name} unavailable: {why}"
    why = unsupported(name, call)
    return None if why is None else f"{name} does not support this call: {why}"


def module(name: str) -> ModuleType:
    loaded, why = load(name)
    if loaded is None:
        raise ValueError(f"gdpa: backend {name!r} cannot run: {why}")
    return loaded
