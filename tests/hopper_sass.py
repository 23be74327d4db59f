"""Test helper: a Hopper GDPA backward kernel cross-compiled for sm_90a on the CPU and disassembled with the
cuobjdump that Triton's wheel carries, for tests of what ptxas emits (no GPU)."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_COMPILE = """
import dataclasses
import cutlass
from kernels.gdpa.hopper import launch
plan = dataclasses.replace(launch.backward_plan({head_dim}, {causal}, {max_q}, {max_kv}), **{plan_changes})
launch._compile_backward(cutlass.BFloat16, {head_dim}, 1, "{activation}", {causal}, plan, True, False)
"""


def backward_sass(
    dump: Path,
    activation: str,
    causal: bool = False,
    *,
    head_dim: int = 128,
    max_q: int = 2048,
    max_kv: int = 2048,
    plan_changes: dict | None = None,
) -> str:
    """The SASS of the backward main kernel `launch.backward_plan` picks for the shape (fields of the plan
    replaced by `plan_changes`), compiled in a child process that writes its cubin under `dump` (new, empty).
    Skips the test without flash-attn-4 or without Triton's cuobjdump."""
    if importlib.util.find_spec("flash_attn") is None:
        pytest.skip("needs flash-attn-4 (the fa4 extra)")
    import triton

    tool = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
    if not tool.exists():
        pytest.skip("no cuobjdump in this triton build")
    dump.mkdir(parents=True)  # CuTe writes into an existing directory only, read once per process
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "CUTE_DSL_KEEP": "cubin", "CUTE_DSL_DISABLE_FILE_CACHING": "1"}
    env["CUTE_DSL_DUMP_DIR"] = str(dump)
    script = _COMPILE.format(
        head_dim=head_dim,
        causal=causal,
        max_q=max_q,
        max_kv=max_kv,
        plan_changes=repr(plan_changes or {}),
        activation=activation,
    )
    run = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-2000:]
    (cubin,) = dump.rglob("*.cubin")
    return subprocess.run([str(tool), "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
