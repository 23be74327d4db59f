"""Datasheet facts per GPU (docs/DESIGN.md §8): leads only; every run also measures its own GEMM ceiling."""

from __future__ import annotations

from typing import NamedTuple


class Datasheet(NamedTuple):
    peak_tflops: dict[str, float]  # dense, per dtype
    hbm_tb_s: float
    sms: int
    default_power_w: float


# name substring -> its datasheet
GPUS: dict[str, Datasheet] = {
    "B200": Datasheet({"bf16": 2250.0, "fp16": 2250.0, "fp32": 80.0}, hbm_tb_s=8.0, sms=148, default_power_w=1000.0),
    "H200": Datasheet({"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}, hbm_tb_s=4.8, sms=132, default_power_w=700.0),
    "H100": Datasheet({"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}, hbm_tb_s=3.35, sms=132, default_power_w=700.0),
    "A100": Datasheet({"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}, hbm_tb_s=2.0, sms=108, default_power_w=400.0),
}


def lookup(gpu_name: str | None) -> dict | None:
    """The table row whose key appears in the device name (e.g. 'NVIDIA H200' -> H200), or None."""
    if not gpu_name:
        return None
    upper = gpu_name.upper()
    for key, row in GPUS.items():
        if key in upper:
            return {"name": key, **row._asdict()}
    return None
