"""What a run's numbers mean when they were not measured on a GPU, said where a newcomer reads them first:
the banner that opens a CPU run's report, whether speed ratios are shown at all, and why `compare` of
such runs gates nothing on speed.

On a machine without a GPU the Triton kernels run through Triton's interpreter (TRITON_INTERPRET=1: Python
executing every program instance, 100-10,000x slower than compiled code) and the other providers as eager
PyTorch on the CPU; a smoke config takes two samples per case after a 1 ms warm-up, and two runs of the
same config differ by up to 100x on a shared machine. Such a run proves the pipeline — the correctness
gate, timing, records, files and report — and says nothing about kernel speed; a ratio between an
interpreted kernel and eager PyTorch means nothing at all.
"""

from __future__ import annotations

from typing import Any


def is_cpu_run(meta: Any) -> bool:
    """A run measured on the CPU (no GPU named, device `cpu`)."""
    return isinstance(meta, dict) and not meta.get("gpu") and str(meta.get("device") or "") == "cpu"


def interpreted(meta: Any) -> bool:
    """The run's Triton kernels went through the interpreter."""
    env = meta.get("env") if isinstance(meta, dict) else None
    return isinstance(env, dict) and str(env.get("TRITON_INTERPRET") or "") not in ("", "0")


def ratios_shown(meta: Any) -> bool:
    """Whether speed ratios between providers (speedup columns and plot) mean anything for this run."""
    return not is_cpu_run(meta)


def cpu_banner(meta: Any, n_samples: int | None) -> str | None:
    """The paragraph a CPU run's report opens with (None for a GPU run)."""
    if not is_cpu_run(meta):
        return None
    how = (
        "the Triton kernels ran through Triton's interpreter (Python executing every program instance, "
        "100–10,000× slower than compiled code) and the other providers as eager PyTorch"
        if interpreted(meta)
        else "the providers ran as eager PyTorch"
    )
    samples = f" with {n_samples} sample(s) per case" if n_samples else ""
    return (
        f"CPU run: {how} on the CPU{samples}. These numbers prove the pipeline works — every case passed or "
        "failed the correctness gate, was timed, recorded and drawn — and say nothing about kernel speed: "
        "on a shared CPU two runs of one config differ by up to 100×. Speed ratios between providers are "
        "not shown (an interpreted kernel against eager PyTorch compares nothing); TFLOP/s columns are tiny "
        "by nature. For performance, run a GPU config (configs/h200.yaml, configs/b200.yaml) on a GPU."
    )


def compare_notes(base: dict, cur: dict, rows: list[dict], min_samples: int) -> list[str]:
    """Lines `compare` prints before its verdict when the runs cannot show a speed change: CPU runs, or no
    case with `min_samples` samples on both sides (a smoke run takes 2)."""
    notes = []
    both = [r for r in rows if r.get("n_base") and r.get("n_cur")]
    tested = [r for r in both if r["n_base"] >= min_samples and r["n_cur"] >= min_samples]
    if both and not tested:
        notes.append(
            f"note: nothing is gated on speed here: no case has {min_samples} samples (--min-samples) in both "
            "runs, so no change can be shown significant (a smoke run takes 2 per case); the changes listed are "
            "shown, not judged; only failed and missing cases can fail the gate."
        )
    cpu = [name for name, d in (("baseline", base), ("current", cur)) if is_cpu_run(d.get("meta"))]
    if cpu:
        notes.append(
            f"note: the {' and '.join(cpu)} {'is a CPU run' if len(cpu) == 1 else 'are CPU runs'}: wall times "
            "of the Triton interpreter and eager PyTorch on a shared CPU swing by up to 100× between runs, so "
            "a change here says nothing about the kernels on a GPU (configs/ci-cpu.yaml with --threshold 9 "
            "is the coarse CPU gate; configs/ci.yaml on a GPU is the real one)."
        )
    return notes
