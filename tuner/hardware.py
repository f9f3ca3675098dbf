"""What the trials run on: the node's devices, as a type and a list of device ids.

On a CPU node the devices are the CPU cores this process may use, and the type is `cpu`. NVIDIA
GPUs (NVML inventory, GPU types such as H200) are not implemented yet: a spec naming a GPU type
is refused with a message that says so.
"""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import asdict, dataclass

from tuner.errors import BadInput


@dataclass(frozen=True)
class Inventory:
    kind: str  # "cpu" (or "gpu", once NVML inventory exists)
    type: str  # the spec's hardware.gpu_type it satisfies
    devices: tuple[int, ...]
    description: str
    host: str

    def to_dict(self) -> dict:
        return asdict(self)


def cpu_inventory() -> Inventory:
    cores = tuple(sorted(os.sched_getaffinity(0)))
    return Inventory(
        kind="cpu",
        type="cpu",
        devices=cores,
        description=f"{len(cores)} CPU cores ({platform.processor() or platform.machine()})",
        host=socket.gethostname(),
    )


def detect(gpu_type: str, devices: int | None) -> Inventory:
    """The inventory for the spec's hardware section, or a one-line reason it cannot be had."""
    if gpu_type.lower() != "cpu":
        raise BadInput(
            f"hardware.gpu_type {gpu_type}: GPU inventory (NVML) is not implemented in this "
            "version of tuner; use gpu_type: cpu with vLLM's CPU build"
        )
    inv = cpu_inventory()
    if devices is not None:
        if devices > len(inv.devices):
            raise BadInput(
                f"hardware.devices {devices}: this node has only {len(inv.devices)} usable "
                "CPU cores: lower it or leave it out"
            )
        inv = Inventory(inv.kind, inv.type, inv.devices[:devices], inv.description, inv.host)
    return inv


def split_devices(devices: list[int], parts: int) -> list[list[int]]:
    """Split device ids into `parts` contiguous groups of equal size (the remainder unused)."""
    per = len(devices) // parts
    return [devices[i * per : (i + 1) * per] for i in range(parts)]
