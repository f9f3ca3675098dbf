"""GPU types tuner knows (tuner/data/gpus.csv, from vendor datasheets) and their architectures."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache

from tuner import DATA_DIR
from tuner.spec.errors import BadInput

DATA = DATA_DIR


@dataclass(frozen=True)
class GpuType:
    name: str
    arch: str  # hopper, blackwell, cdna3, or cpu
    memory_gb: float
    hbm_tb_s: float | None = None
    bf16_dense_tflops: float | None = None
    fp8_dense_tflops: float | None = None
    fp4_dense_tflops: float | None = None
    nvlink_bidir_gb_s: float | None = None


CPU = GpuType(name="cpu", arch="cpu", memory_gb=0.0)


def _num(v: str) -> float | None:
    return float(v) if v.strip() else None


@cache
def gpu_types() -> dict[str, GpuType]:
    out = {"cpu": CPU}
    with open(DATA / "gpus.csv") as f:
        for row in csv.DictReader(f):
            out[row["gpu"]] = GpuType(
                name=row["gpu"], arch=row["arch"], memory_gb=float(row["memory_gb"]),
                hbm_tb_s=_num(row["hbm_tb_s"]), bf16_dense_tflops=_num(row["bf16_dense_tflops"]),
                fp8_dense_tflops=_num(row["fp8_dense_tflops"]),
                fp4_dense_tflops=_num(row["fp4_dense_tflops"]),
                nvlink_bidir_gb_s=_num(row["nvlink_bidir_gb_s"]),
            )
    return out


def gpu_type(name: str, field: str = "hardware.gpu_type") -> GpuType:
    types = gpu_types()
    for key, t in types.items():
        if key.lower() == name.lower():
            return t
    raise BadInput(f"{field} {name!r} is not a GPU type tuner knows: use one of "
                   f"{', '.join(types)}")
