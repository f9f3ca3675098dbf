"""What the trials run on: the node's devices, as a type and a list of device ids.

On a CPU node the devices are the CPU cores this process may use, and the type is `cpu`. On a
GPU node they are the GPUs NVML reports of the spec's type (tuner/gpus.py).
"""

from __future__ import annotations

import functools
import os
import platform
import socket
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from tuner.spec.errors import BadInput


@dataclass(frozen=True)
class Inventory:
    kind: str  # "cpu" or "gpu"
    type: str  # the spec's hardware.gpu_type it satisfies
    devices: tuple[int, ...]
    description: str
    host: str
    # Devices of the whole node where this inventory is a worker's share of it (`--devices`):
    # a trial on fewer than all of them is pinned to its own (the CPU build's core binding).
    node_devices: int | None = None
    # Devices one engine rank is bound to: one GPU, or on a CPU node a fixed number of cores, so
    # a configuration runs on the same cores whether it has the node alone or shares it.
    per_rank: int = 1
    # On a CPU node, the cores a trial's slot adds for its frontend and load generator, beyond
    # its ranks' (tuner.serve.cpu_layout): 1 where the node has room for it, else 0 (they share
    # the ranks' cores). On a GPU node they run on the host's cores: 0.
    frontend_cores: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    def devices_for(self, world: int) -> int:
        """The devices a server of `world` ranks runs on, and what its figures are per."""
        return world * self.per_rank

    def slot_for(self, world: int) -> int:
        """The devices a trial of `world` ranks takes from the node: its ranks' and, on a CPU
        node with room, a core for its frontend."""
        return self.devices_for(world) + self.frontend_cores


def parse_cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of /proc/cpuinfo's first processor (x86 lists them as `flags`; other
    architectures have none by that name, and so none of x86's)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


@functools.cache
def cpu_flags() -> frozenset[str]:
    """This machine's CPU feature flags: a CPU trial's server runs here."""
    try:
        return parse_cpu_flags(Path("/proc/cpuinfo").read_text())
    except OSError:
        return frozenset()


# The widest vector instruction set a CPU has, by the /proc/cpuinfo flags that mean it (the
# same sets torch tests, ATen/cpu/Utils.cpp): figures from an AVX2-only CPU and one with
# AVX-512 are not the same machine's.
ISA_TIERS = (("AMX", ("amx_tile",)), ("AVX-512", ("avx512f", "avx512vl", "avx512bw", "avx512dq")),
             ("AVX2", ("avx2",)))


def cpu_model(cpuinfo: str) -> str | None:
    """The CPU's model name from /proc/cpuinfo's first processor (None where it lists none)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return " ".join(value.split())
    return None


def isa_tier(flags: frozenset[str]) -> str | None:
    return next((name for name, needs in ISA_TIERS if set(needs) <= flags), None)


def cpu_description(cores: int, cpuinfo: str) -> str:
    """What a CPU study's figures are of: its cores, model and widest instruction set."""
    parts = [p for p in (cpu_model(cpuinfo), isa_tier(parse_cpu_flags(cpuinfo))) if p]
    arch = platform.processor() or platform.machine()
    return f"{cores} CPU cores ({', '.join(parts) or arch})"


def cpu_inventory() -> Inventory:
    cores = tuple(sorted(os.sched_getaffinity(0)))
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    return Inventory(
        kind="cpu",
        type="cpu",
        devices=cores,
        description=cpu_description(len(cores), cpuinfo),
        host=socket.gethostname(),
    )


def gpu_node_inventory(gpu_type: str, nvml=None) -> Inventory:
    """This node's GPUs of the spec's type (NVML), or a one-line reason they cannot be used."""
    from tuner.serve.nvml import NvmlUnavailable, read_gpus

    try:
        found = read_gpus(nvml)
    except NvmlUnavailable as e:
        raise BadInput(f"hardware.gpu_type {gpu_type} needs NVIDIA GPUs: {e}") from e
    matching = [g for g in found.gpus if g.type and g.type.lower() == gpu_type.lower()]
    if not matching:
        have = ", ".join(sorted({f"{g.name}" for g in found.gpus})) or "no GPUs"
        raise BadInput(f"hardware.gpu_type {gpu_type}: this node has {have}; set gpu_type to "
                       "the node's GPU type or run on a node of that type")
    return Inventory(kind="gpu", type=matching[0].type, devices=tuple(g.index for g in matching),
                     description=f"{len(matching)} x {matching[0].name}, driver {found.driver}",
                     host=found.host)


def detect(gpu_type: str, devices: int | None, nvml=None) -> Inventory:
    """The inventory for the spec's hardware section, or a one-line reason it cannot be had."""
    inv = cpu_inventory() if gpu_type.lower() == "cpu" else gpu_node_inventory(gpu_type, nvml)
    if devices is not None:
        if devices > len(inv.devices):
            have = len(inv.devices)
            unit = ("CPU core" if inv.kind == "cpu" else f"{inv.type} GPU") + "s" * (have != 1)
            raise BadInput(
                f"hardware.devices {devices}: this node has only {have} usable {unit}: lower it "
                "or leave it out"
            )
        inv = replace(inv, devices=inv.devices[:devices])
    return inv


def bind_ranks(inv: Inventory, cores_per_rank: int | None, worlds: list[int],
               parallel: int = 1) -> Inventory:
    """A CPU node's inventory with the cores of one rank fixed for the whole study: the spec's
    `hardware.cores_per_rank`, or by default each trial's share of the cores (the cores over
    the trials run at once, `parallel`), less one for its frontend where the largest world size
    that fits leaves room for it, divided by that world size, so that many of the largest can
    run side by side. Without this, TP1 on every core would be measured per one device and TP2
    per two."""
    if inv.kind != "cpu":
        if cores_per_rank is not None:
            raise BadInput(f"hardware.cores_per_rank is for gpu_type cpu, not {inv.type}: "
                           "leave it out (a GPU rank is one GPU)")
        return inv
    cores = len(inv.devices)
    share = max(1, cores // max(1, parallel))
    widest = max([w for w in worlds if w <= cores] or [1])
    if cores_per_rank is None:
        frontend = 1 if share > widest else 0
        cores_per_rank = max(1, (share - frontend) // widest)
    elif cores_per_rank > cores:
        raise BadInput(f"hardware.cores_per_rank {cores_per_rank}: a trial may use only {cores} "
                       "cores here: lower it")
    frontend = 1 if share > widest * cores_per_rank else 0
    return replace(inv, per_rank=cores_per_rank, frontend_cores=frontend)


def planned_inventory(gpu, devices: int | None) -> Inventory:
    """A node of the given GPU type as a plan describes it (dry runs): stated, not detected."""
    from tuner.serve.engines.rules import gpus_per_node

    # One server spans one node: a GB200 compute tray holds 4 GPUs, whatever the spec says.
    node = gpus_per_node(gpu.name) or 8
    n = min(devices or node, node) if gpu.arch != "cpu" else devices or len(
        cpu_inventory().devices)
    kind = "cpu" if gpu.arch == "cpu" else "gpu"
    return Inventory(kind=kind, type=gpu.name, devices=tuple(range(n)),
                     description=f"{n} x {gpu.name} (planned)", host="planned")


def owned_devices(inv: Inventory, ids: list[int]) -> Inventory:
    """The inventory narrowed to the devices this worker owns (`tuner worker --devices`), so
    several workers on one node never share a GPU (or, on a CPU node, a core)."""
    unknown = sorted(set(ids) - set(inv.devices))
    if unknown:
        unit = "CPU cores" if inv.kind == "cpu" else f"{inv.type} GPUs"
        raise BadInput(f"--devices {','.join(map(str, ids))}: {unknown} are not among this "
                       f"node's usable {unit} {list(inv.devices)}")
    if len(set(ids)) != len(ids):
        raise BadInput(f"--devices {','.join(map(str, ids))}: a device is listed twice")
    return replace(inv, devices=tuple(ids), description=f"devices {ids} of {inv.description}",
                   node_devices=len(inv.devices))
