"""The node's NVIDIA GPUs through NVML (pynvml): model, count, memory, driver, NVLink.

`read_gpus()` asks NVML; the pynvml calls it makes go through one small object (`Nvml`), the
seam tests replace with a recorded inventory. Where NVML is missing (no driver, a CPU node)
`NvmlUnavailable` says so; nothing here invents a GPU.
"""

from __future__ import annotations

import socket
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from tuner.spec.errors import TunerError

EXIT_UNAVAILABLE = 4


class NvmlUnavailable(TunerError):
    exit_code = EXIT_UNAVAILABLE


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str  # as NVML reports it, e.g. "NVIDIA H200"
    type: str | None  # tuner's GPU type (H200, ...), None when not recognised
    memory_gib: float
    uuid: str
    pci_bus_id: str
    nvlink_active: int  # active NVLink links


@dataclass(frozen=True)
class GpuInventory:
    host: str
    driver: str
    cuda_driver: str | None
    gpus: tuple[Gpu, ...]
    nvlink_peers: dict[int, list[int]] = field(default_factory=dict)  # NVLink P2P peers

    @property
    def types(self) -> set[str | None]:
        return {g.type for g in self.gpus}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Nvml(Protocol):
    """The NVML calls tuner makes (a subset of pynvml's API, same names and meaning)."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str: ...
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int: ...
    def nvmlDeviceGetP2PStatus(self, h1: Any, h2: Any, index: int) -> int: ...


# NVML product names -> tuner GPU types (tuner/data/gpus.csv), most specific first.
_TYPES = [("GB200", "GB200"), ("B200", "B200"), ("H200", "H200"),
          ("H100 80GB HBM3", "H100-SXM"), ("H100 SXM", "H100-SXM")]
MAX_NVLINKS = 18  # NVML_NVLINK_MAX_LINKS on Hopper/Blackwell


def gpu_type_of(name: str) -> str | None:
    upper = name.upper()
    for needle, t in _TYPES:
        if needle.upper() in upper:
            return t
    return None


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _nvlinks(nvml: Nvml, handle: Any) -> int:
    active = 0
    for link in range(MAX_NVLINKS):
        try:
            active += int(nvml.nvmlDeviceGetNvLinkState(handle, link) == 1)
        except Exception:  # links past the device's count, or no NVLink at all
            break
    return active


def read_gpus(nvml: Nvml | None = None) -> GpuInventory:
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[no-redef]
        except ImportError as e:
            raise NvmlUnavailable("NVML is not available: the nvidia-ml-py package is not "
                                  "installed (pip install nvidia-ml-py)") from e
    try:
        nvml.nvmlInit()
    except Exception as e:
        raise NvmlUnavailable(f"no NVIDIA GPU inventory on this machine: NVML could not start "
                              f"({type(e).__name__}: {e}); is the NVIDIA driver installed?") from e
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        gpus = []
        for i, h in enumerate(handles):
            name = _text(nvml.nvmlDeviceGetName(h))
            gpus.append(Gpu(
                index=i, name=name, type=gpu_type_of(name),
                memory_gib=round(nvml.nvmlDeviceGetMemoryInfo(h).total / 2**30, 1),
                uuid=_text(nvml.nvmlDeviceGetUUID(h)),
                pci_bus_id=_text(nvml.nvmlDeviceGetPciInfo(h).busId),
                nvlink_active=_nvlinks(nvml, h),
            ))
        peers = {i: [j for j, h2 in enumerate(handles) if j != i and _p2p_nvlink(nvml, h, h2)]
                 for i, h in enumerate(handles)}
        cuda = nvml.nvmlSystemGetCudaDriverVersion()
        return GpuInventory(
            host=socket.gethostname(), driver=_text(nvml.nvmlSystemGetDriverVersion()),
            cuda_driver=f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
            gpus=tuple(gpus), nvlink_peers=peers,
        )
    finally:
        nvml.nvmlShutdown()


def _p2p_nvlink(nvml: Nvml, h1: Any, h2: Any) -> bool:
    try:
        import pynvml

        index, ok = pynvml.NVML_P2P_CAPS_INDEX_NVLINK, pynvml.NVML_P2P_STATUS_OK
    except ImportError:  # the constants are fixed by NVML's C API
        index, ok = 2, 0
    try:
        return nvml.nvmlDeviceGetP2PStatus(h1, h2, index) == ok
    except Exception:
        return False


def describe(inv: GpuInventory) -> list[str]:
    lines = [f"{inv.host}: {len(inv.gpus)} GPU(s), driver {inv.driver}"
             + (f", CUDA {inv.cuda_driver}" if inv.cuda_driver else "")]
    for g in inv.gpus:
        peers = inv.nvlink_peers.get(g.index, [])
        link = (f"NVLink x{g.nvlink_active} to {len(peers)} peer(s)" if g.nvlink_active
                else "no NVLink")
        lines.append(f"  GPU {g.index}: {g.name} ({g.type or 'type not recognised'}), "
                     f"{g.memory_gib:g} GiB, {link}, {g.pci_bus_id}")
    return lines
