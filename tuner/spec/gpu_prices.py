"""What a device-hour costs: the spec's `hardware.gpu_hour_usd`, else the EXAMPLE figure that
tuner/data/gpu_prices.csv gives for the GPU type (per GPU-hour; on `cpu`, per core-hour, since a
CPU node's device is a core). The table's figures are public examples with their source and
date, not quotes: set `hardware.gpu_hour_usd` to price what you pay."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache

from tuner import DATA_DIR

PRICES_FILE = DATA_DIR / "gpu_prices.csv"
OVERRIDE = "hardware.gpu_hour_usd"


@dataclass(frozen=True)
class DevicePrice:
    usd_per_hour: float  # per device: a GPU, or a CPU core
    source: str  # the table's source and date, or `hardware.gpu_hour_usd`
    example: bool  # from the shipped table of example figures, not the spec


@cache
def price_table() -> dict[str, DevicePrice]:
    """The shipped example prices by GPU type (the names tuner/data/gpus.csv uses, and `cpu`)."""
    with open(PRICES_FILE) as f:
        return {row["gpu"]: DevicePrice(
            usd_per_hour=float(row["usd_per_device_hour"]),
            source=f"{row['basis']}, {row['source']}, {row['date']}", example=True)
            for row in csv.DictReader(f)}


def device_price(gpu_type: str, gpu_hour_usd: float | None) -> DevicePrice | None:
    """The price of one device-hour of `gpu_type`: the spec's override when it sets one, else
    the table's example (the type's name matched as `hardware.gpu_type` is, ignoring case);
    None for a type the table does not price."""
    if gpu_hour_usd is not None:
        return DevicePrice(usd_per_hour=float(gpu_hour_usd), source=OVERRIDE, example=False)
    for name, price in price_table().items():
        if name.lower() == gpu_type.lower():
            return price
    return None
