"""Resource usage of the Hopper GDPA kernels without a GPU: cross-compile for sm_90a (CuTe DSL), keep the
cubins, and report registers, spills and instruction mix per kernel (cuobjdump from triton's package).

    CUTE_DSL_ARCH=sm_90a python docs/experiments/hopper_sass.py [activation ...]

FA4's own softmax kernels are compiled the same way for comparison (FA4's forward via its fake-tensor
route; nothing here touches a compile cache FA4 later uses).
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DUMP = Path(tempfile.mkdtemp(prefix="gdpa_sass_"))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ["CUTE_DSL_KEEP"] = os.environ.get("GDPA_SASS_KEEP", "cubin")
os.environ["CUTE_DSL_DUMP_DIR"] = str(DUMP)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cutlass  # noqa: E402

from kernels.gdpa.hopper import launch  # noqa: E402

COUNT = (
    "MUFU.TANH",
    "MUFU.EX2",
    "MUFU.RCP",
    "FFMA",
    "FMUL",
    "FADD",
    "FSEL",
    "FSETP",
    "FMNMX",
    "F2FP",
    "HGMMA",
    "STL",
    "LDL",
    "SHFL",
)


def cuobjdump() -> str:
    found = shutil.which("cuobjdump")
    if found:
        return found
    import triton

    return str(Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump")


def report(tag: str) -> None:
    tool = cuobjdump()
    for cubin in sorted(DUMP.rglob("*.cubin")):
        if cubin.stat().st_mtime < report.since:
            continue
        usage = subprocess.run([tool, "--dump-resource-usage", str(cubin)], capture_output=True, text=True).stdout
        sass = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True).stdout
        if os.environ.get("SASS_OUT"):
            Path(os.environ["SASS_OUT"]).mkdir(parents=True, exist_ok=True)
            (Path(os.environ["SASS_OUT"]) / (tag.replace(" ", "_") + ".sass")).write_text(sass)
        for m in re.finditer(r"Function (\S+):\s*\n\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", usage):
            name = m.group(1)
            counts = {op: len(re.findall(rf"\b{re.escape(op)}\b", sass)) for op in COUNT}
            counts["WAIT0"] = sass.count("DEPBAR.LE gsb0, 0x0")  # wgmma waits: one per HGMMA = serialized
            print(
                f"{tag:<28} {name[:60]:<60} REG {m.group(2)} STACK {m.group(3)} LOCAL {m.group(5)} "
                + " ".join(f"{k}={v}" for k, v in counts.items() if v),
                flush=True,
            )
    report.since = __import__("time").time()


report.since = 0.0


def fa4_softmax() -> None:
    """FA4's own sm90 forward and backward (softmax), compiled through its interface on fake tensors."""
    os.environ.setdefault("FLASH_ATTENTION_ARCH", "sm_90")
    os.environ.setdefault("FLASH_ATTENTION_NUM_SMS", "132")
    import torch
    from flash_attn.cute.interface import _flash_attn_bwd, _flash_attn_fwd
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q, k, v, o, do = (torch.empty(4096, 4, 128, dtype=torch.bfloat16, device="cuda") for _ in range(5))
        lse = torch.empty(4, 4096, dtype=torch.float32, device="cuda")
        cu = torch.empty(1153, dtype=torch.int32, device="cuda")
        _flash_attn_fwd(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=256, max_seqlen_k=256)
        report("fa4 fwd softmax")
        _flash_attn_bwd(q, k, v, o, do, lse, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=256, max_seqlen_k=256)
        report("fa4 bwd softmax")


def main(names):
    if "fa4" in names:
        names.remove("fa4")
        fa4_softmax()
    for name in names:
        fcfg = launch.forward_config(128, 1, 1000)
        launch._compile_forward(cutlass.BFloat16, 128, 1, name, False, fcfg)
        report(f"gdpa fwd {name}")
        for max_q, max_kv in ((2048, 2048), (2048, 256)):  # the two backward plans of head dim 128
            plan = launch.backward_plan(128, False, max_q, max_kv)
            launch._compile_backward(cutlass.BFloat16, 128, 1, name, False, plan, True, False)
            report(f"gdpa bwd {name} {plan.variant}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["fast_gelu"])
    print(f"artifacts in {DUMP}")
