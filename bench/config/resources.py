"""Memory before allocation: what a workload's tensors and a case's working set will take, against what
the device and the host have free, checked before anything is allocated (docs/DESIGN.md §7).

- When a config loads, each workload's lengths are drawn (to validate it): `check_host_for_lengths`
  refuses a batch size whose draw alone would not fit in host memory (`B: 1e9`).
- Before a run starts, `check_run_fits` estimates every selected case: when none fits, the run is
  refused (exit 2) with the smallest case's need; when some do not, they are `skipped` as they come.
- In the runner, `batch_need` / `case_need` against `free_bytes(device)` decide per workload and per case:
  a case that does not fit is recorded `skipped: needs N GiB, M GiB free`, never run into an
  out-of-memory crash, and never "every case failed, exit 0".

The estimates are upper-bound models of what the runner allocates: the batch (q, dout, k, v in the
dtype, plus the fp32 draw they are cast from), a case's outputs, gradients and the copies autograd
needs, the provider's scores by its `scores_memory` declaration (kernels.registry.Provider), and the
correctness gate's fp32 reference (one sequence at a time; the gate always checks the longest). Free
memory is what the device reports (CUDA: `mem_get_info` plus what PyTorch's cache holds unused), or on
the host the smallest of MemAvailable, the cgroup's limit and the address-space limit (`ulimit -v`).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bench.config.cases import Case, Workload
from bench.errors import ConfigError, UsageError
from kernels.registry import provider_class

GiB = 2**30
# The fraction of free memory a plan may use. On the host the estimates (CPU peaks measured within ~25% of
# them: tests/test_resources.py) keep a margin, because exceeding it summons the OOM killer and loses the
# process; on a GPU an overshoot is a CUDA out-of-memory error the runner records as `failed`, so a case
# is skipped only when its expected peak exceeds what is free (the H200 example's naive forward at L=2048
# peaked near 123 of 141 GB and ran).
HEADROOM = {"cuda": 1.0, "cpu": 0.75}
HOST_HEADROOM = HEADROOM["cpu"]
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
# Host bytes per sequence: drawing a batch's lengths (int64 and float64 temporaries of the families, the
# pairing and the sort) and keeping them in results.json (two lists of Python ints, then their text).
# fp32 score-sized tensors one sequence of the exact reference holds at once: the activation's temporaries
# (fwd), and what autograd saves of them (with gradients): measured CPU peaks were 5-9 and 8-13 of them
ACT_FWD, ACT_GRAD = 8, 14
HOST_BYTES_DRAW = 96
HOST_BYTES_RECORD = 160


def gib(n: float) -> str:
    """Bytes as GiB with three significant digits ("12.3 GiB", "0.0041 GiB")."""
    return f"{n / GiB:.3g} GiB"


# ----------------------------------------------------------------------------------------- free memory


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_free() -> int | None:
    """The memory cgroup's limit minus its usage (cgroup v2 or v1), None without a limit."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if controllers == "":  # v2
            base = Path("/sys/fs/cgroup") / rel.lstrip("/")
            limit, used = _read_int(base / "memory.max"), _read_int(base / "memory.current")
        elif "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory") / rel.lstrip("/")
            if not base.exists():
                base = Path("/sys/fs/cgroup/memory")
            limit, used = _read_int(base / "memory.limit_in_bytes"), _read_int(base / "memory.usage_in_bytes")
        else:
            continue
        if limit is not None and used is not None and limit < 2**60:
            return max(0, limit - used)
    return None


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def host_free_bytes() -> int | None:
    """What this process can still allocate on the host: the smallest of MemAvailable, the cgroup's
    free memory and the address-space limit minus the current virtual size; None when unknown."""
    cands = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                cands.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    cg = _cgroup_free()
    if cg is not None:
        cands.append(cg)
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    vm = _status_kib("VmSize")
    if soft != resource.RLIM_INFINITY and vm is not None:
        cands.append(max(0, soft - vm * 1024))
    if not cands and hasattr(os, "sysconf"):
        try:
            cands.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError):
            pass
    return min(cands) if cands else None


def free_bytes(device: torch.device) -> int | None:
    """Free memory where a case's tensors go: the GPU's (with PyTorch's cached, unused blocks), or the
    host's for a CPU run."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    return host_free_bytes()


# ------------------------------------------------------------------------------------------- estimates


@dataclass(frozen=True)
class Shape:
    """What the estimates need of a workload: sizes and the totals/maxima of its lengths."""

    B: int
    H: int
    Hkv: int
    D: int
    itemsize: int
    total_q: int
    total_kv: int
    max_q: int
    max_kv: int
    max_pairs: int  # the largest Lq·Lk of one sequence
    sum_pairs: int  # Σ Lq·Lk

    @classmethod
    def of(cls, w: Workload, q: np.ndarray, kv: np.ndarray) -> Shape:
        pairs = q.astype(np.float64) * kv.astype(np.float64)
        return cls(
            B=w.B,
            H=w.H,
            Hkv=w.Hkv,
            D=w.D,
            itemsize=DTYPE_BYTES[w.dtype],
            total_q=int(q.sum()),
            total_kv=int(kv.sum()),
            max_q=int(q.max(initial=0)),
            max_kv=int(kv.max(initial=0)),
            max_pairs=int(pairs.max(initial=0)),
            sum_pairs=int(pairs.sum()),
        )


def batch_resident(s: Shape) -> int:
    """Bytes a workload's batch holds while its cases run: q and dout [ΣLq, H, D], k and v [ΣLk, Hkv, D] in
    the dtype, and the offsets."""
    return s.itemsize * 2 * (s.total_q * s.H + s.total_kv * s.Hkv) * s.D + 16 * (s.B + 1)


ALLOCATOR_ROUND = 2 * 2**20  # PyTorch's CUDA caching allocator hands out large blocks in 2 MiB steps


def batch_need(s: Shape) -> int:
    """Bytes the batch takes while it is built: what it holds, plus the fp32 tensor each part is drawn as
    before the cast (workloads.batch.make_batch), freed before any case runs, plus one allocator step per
    tensor (on the H200 the fp32 draw took 716,800 bytes more than its size)."""
    return batch_resident(s) + 4 * max(s.total_q * s.H, s.total_kv * s.Hkv) * s.D + 5 * ALLOCATOR_ROUND


def _scores(s: Shape, model: str, grads: bool) -> int:
    """The provider's own working memory for one call, by its `scores_memory` declaration."""
    e = s.itemsize
    if model == "padded":  # pad q/k/v to [B, maxL, H, D], scores [B, H, maxLq, maxLk] and their activation
        scores = s.B * s.H * s.max_q * s.max_kv
        pads = e * s.B * (s.max_q + 2 * s.max_kv) * s.H * s.D
        return (2 if grads else 1) * pads + (5 if grads else 3) * e * scores  # s, act(s), the masked copy
    if model == "padded_fused":  # the same under torch.compile: activation and mask fused into one tensor
        scores = s.B * s.H * s.max_q * s.max_kv
        pads = e * s.B * (s.max_q + 2 * s.max_kv) * s.H * s.D
        return (2 if grads else 1) * pads + (3 if grads else 1) * e * scores
    if model == "per_sequence":  # fp32 copies; one sequence's scores, or every one's under autograd
        copies = 4 * (2 * s.total_q * s.H + 2 * s.total_kv * s.Hkv) * s.D
        return copies + 4 * s.H * (ACT_GRAD * s.sum_pairs if grads else ACT_FWD * s.max_pairs)
    # a fused kernel: row statistics and an fp32 accumulator of the rows
    return 4 * s.total_q * s.H * (s.D + 2 if grads else 2)


def case_need(s: Shape, mode: str, scores_memory: str, gate: bool, autotune_bytes: int = 0) -> int:
    """Bytes a case allocates on top of its batch: the timed call's outputs, gradients and the fresh
    leaves autograd needs, the provider's scores and what its first call tunes with (`autotune_bytes`:
    kernels.registry.Provider), or (when larger) the correctness gate's fp32 reference of the longest
    sequence plus the provider's own run."""
    grads = mode != "fwd"
    e = s.itemsize
    q_el, kv_el = s.total_q * s.H * s.D, s.total_kv * s.Hkv * s.D
    out = e * q_el
    timed = out + _scores(s, scores_memory, grads) + autotune_bytes
    if grads:
        timed += 2 * e * (q_el + 2 * kv_el)  # the with_grad copies of q, k, v and their gradients
    if not gate:
        return timed
    rows_q, rows_kv = s.max_q * s.H * s.D, s.max_kv * s.Hkv * s.D
    reference = 4 * s.H * s.max_pairs * (ACT_GRAD if grads else ACT_FWD) + 4 * 3 * (rows_q + 2 * rows_kv)
    return max(timed, reference)  # the gate's reference is freed before the provider runs


def skip_reason(need: int, free: int | None, device: torch.device, what: str) -> str | None:
    """The `skipped` reason when `need` bytes do not fit in `free` (with the device's HEADROOM), else None."""
    if free is None or need <= HEADROOM.get(device.type, HOST_HEADROOM) * free:
        return None
    return f"needs {gib(need)} ({what}), {gib(free)} free on {device}; allowed: a smaller B, H, D or length"


# ------------------------------------------------------------------------------------ before a run


def check_host_for_lengths(B: int, where: str) -> None:
    """A workload of B sequences can have its lengths drawn in host memory (ConfigError otherwise)."""
    free = host_free_bytes()
    need = B * HOST_BYTES_DRAW
    if free is not None and need > HOST_HEADROOM * free:
        raise ConfigError(
            f"{where}: B={B:,} sequences need ~{gib(need)} of host memory to draw their lengths, "
            f"{gib(free)} free; allowed: a smaller B"
        )


def scores_memory_of(case: Case) -> str:
    """The `scores_memory` its provider declares (kernels.registry.Provider)."""
    try:
        return provider_class(case.provider.name).scores_memory
    except KeyError:  # the config loader has reported it already
        return "tiles"


def check_run_fits(cases: list[Case], device: torch.device, gate: bool, scores_memory=scores_memory_of) -> None:
    """Refuse a run (UsageError, before anything is written) when not one selected case fits in the
    free memory, or when the run's per-sequence records alone would not fit in host memory.
    `scores_memory(case)` is the provider's declaration."""
    shapes: dict[str, Shape] = {}
    for c in cases:
        if c.workload.name not in shapes:
            q, kv = c.workload.lengths()
            shapes[c.workload.name] = Shape.of(c.workload, q, kv)
    host = host_free_bytes()
    record = sum(s.B for s in shapes.values()) * HOST_BYTES_RECORD
    if host is not None and record > HOST_HEADROOM * host:
        raise UsageError(
            f"the run's workloads hold {sum(s.B for s in shapes.values()):,} sequences whose lengths results.json "
            f"records: ~{gib(record)} of host memory, {gib(host)} free; allowed: fewer or smaller workloads"
        )
    free = free_bytes(device)
    if free is None:
        return
    needs, memory = [], {}
    for c in cases:
        if c.label not in memory:
            memory[c.label] = scores_memory(c)
        s = shapes[c.workload.name]
        need = max(batch_need(s), batch_resident(s) + case_need(s, c.mode, memory[c.label], gate))
        needs.append((need, c))
    smallest, case = min(needs, key=lambda x: x[0])
    if smallest > HEADROOM.get(device.type, HOST_HEADROOM) * free:
        s = shapes[case.workload.name]
        raise UsageError(
            f"no selected case fits in memory: the smallest, {case.id}, needs {gib(smallest)} (B={s.B:,}, "
            f"H={s.H:,}, D={s.D:,}, {s.total_q:,} query and {s.total_kv:,} key tokens), {gib(free)} free on "
            f"{device}; allowed: a smaller B, H, D or length"
        )
