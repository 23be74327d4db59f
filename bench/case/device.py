"""Which device a run uses, and the Triton interpreter on machines without a GPU."""

from __future__ import annotations

import contextlib
import os

import torch

from bench.errors import UsageError


def use_interpreter_without_gpu() -> None:
    """Without a CUDA GPU the Triton kernels can only run through the interpreter. It must be chosen
    before any kernel module is imported: `triton.jit` reads TRITON_INTERPRET at decoration time."""
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def check_device_option(cfg_device: str, index, option: str = "--device") -> None:
    """`--device N` picks a CUDA GPU: on a CPU config it would be ignored, so it is refused."""
    if index is not None and cfg_device == "cpu":
        raise UsageError(
            f"{option} {index}: the config runs on device: cpu, where {option} has nothing to pick; allowed: "
            f"no {option}, or a device: cuda config"
        )


def check_device(cfg_device: str, index: int | None = None) -> None:
    """The one-line UsageError of a device that does not exist, without creating a CUDA context (the
    parent of a worker process checks with this; the worker takes the device)."""
    if cfg_device == "cpu":
        return
    if not torch.cuda.is_available():
        raise UsageError(
            "the config asks for device: cuda but no CUDA GPU is visible (use configs/smoke.yaml on a CPU machine)"
        )
    if index is not None and (index < 0 or index >= torch.cuda.device_count()):
        raise UsageError(f"--device {index}: only {torch.cuda.device_count()} GPU(s) visible")


def resolve_device(cfg_device: str, index: int | None = None) -> torch.device:
    """The config's device (`cuda` or `cpu`), with `index` picking the GPU; one-line UsageError when
    it does not exist. Sets the current CUDA device: libraries that launch on "the current device"
    (Triton, some cuDNN/cuBLAS paths) must see this one."""
    check_device(cfg_device, index)
    if cfg_device == "cpu":
        return torch.device("cpu")
    idx = torch.cuda.current_device() if index is None else index
    torch.cuda.set_device(idx)
    return torch.device("cuda", idx)


@contextlib.contextmanager
def harness_stream(device: torch.device):
    """Every call of a CUDA run on one stream of the harness's own instead of the legacy default stream. A
    kept forward's backward runs on the forward's stream, and CUDA graphs cannot capture work on the legacy
    default stream: on it each process's first backward capture failed (the H200, 2026-12-02). Kernels run
    on it as on any stream; the run records it (`timing_stream`)."""
    if device.type != "cuda":
        yield
        return
    with torch.cuda.stream(torch.cuda.Stream(device)):
        yield
