"""GPU inventory through NVML, tested against a recorded node (the seam), never a pretend GPU in
product code; and the real answer of this machine's NVML."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.conftest import run_tuner
from tuner.serve.hardware import detect
from tuner.serve.nvml import NvmlUnavailable, gpu_type_of, read_gpus
from tuner.spec.errors import BadInput


class RecordedNvml:
    """What NVML answered on an 8 x H200 HGX node (NVLink between every pair)."""

    def __init__(self, names=("NVIDIA H200",) * 8, links=18):
        self.names, self.links, self.shut = names, links, False

    def nvmlInit(self): pass
    def nvmlShutdown(self): self.shut = True
    def nvmlSystemGetDriverVersion(self): return "570.133.20"
    def nvmlSystemGetCudaDriverVersion(self): return 12080
    def nvmlDeviceGetCount(self): return len(self.names)
    def nvmlDeviceGetHandleByIndex(self, i): return i
    def nvmlDeviceGetName(self, h): return self.names[h]
    def nvmlDeviceGetMemoryInfo(self, h): return SimpleNamespace(total=143771 * 2**20)
    def nvmlDeviceGetUUID(self, h): return f"GPU-{h:08d}"
    def nvmlDeviceGetPciInfo(self, h): return SimpleNamespace(busId=f"00000000:{h + 0x18:02X}:00.0")

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= self.links:
            raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")
        return 1

    def nvmlDeviceGetP2PStatus(self, h1, h2, index):
        return 0 if self.links else 5


class NoDriver:
    def nvmlInit(self):
        raise RuntimeError("NVML Shared Library Not Found")


def test_a_recorded_h200_node_reads_as_eight_h200s_linked_by_nvlink():
    nvml = RecordedNvml()
    inv = read_gpus(nvml)
    assert [g.type for g in inv.gpus] == ["H200"] * 8
    assert inv.gpus[0].memory_gib == 140.4 and inv.driver == "570.133.20"
    assert inv.cuda_driver == "12.8"
    assert inv.gpus[3].nvlink_active == 18 and inv.nvlink_peers[3] == [0, 1, 2, 4, 5, 6, 7]
    assert nvml.shut  # NVML is always shut down again


@pytest.mark.parametrize("name, t", [
    ("NVIDIA H200", "H200"), ("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA B200", "B200"),
    ("NVIDIA GB200", "GB200"), ("NVIDIA H100 PCIe", None), ("Tesla V100-SXM2-32GB", None)])
def test_product_names_map_to_gpu_types(name, t):
    assert gpu_type_of(name) == t


def test_a_study_for_h200_gets_the_h200s_of_the_node():
    inv = detect("H200", None, nvml=RecordedNvml())
    assert (inv.kind, inv.type, inv.devices) == ("gpu", "H200", tuple(range(8)))
    assert detect("H200", 4, nvml=RecordedNvml()).devices == (0, 1, 2, 3)


def test_a_spec_for_another_gpu_type_is_refused_naming_what_the_node_has():
    with pytest.raises(BadInput, match="hardware.gpu_type B200: this node has NVIDIA H200"):
        detect("B200", None, nvml=RecordedNvml())


def test_a_spec_asking_more_gpus_than_the_node_has_is_refused_with_the_count():
    # What a one-GPU H200 machine answered to examples/gpt-oss-120b.yaml (devices: 8).
    with pytest.raises(BadInput, match="hardware.devices 8: this node has only 1 usable H200 "
                                       "GPU: lower it or leave it out"):
        detect("H200", 8, nvml=RecordedNvml(names=("NVIDIA H200",), links=0))


def test_without_nvml_a_gpu_study_is_refused_plainly():
    with pytest.raises(NvmlUnavailable, match="NVML could not start"):
        read_gpus(NoDriver())
    with pytest.raises(BadInput, match="hardware.gpu_type H200 needs NVIDIA GPUs"):
        detect("H200", None, nvml=NoDriver())


def test_tuner_gpus_on_this_machine(tmp_path):
    """Where NVML is missing (CI, this CPU machine) it says so and exits 4; on a GPU node it
    lists the GPUs."""
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        has_nvml = True
    except Exception:
        has_nvml = False
    proc = run_tuner("gpus", cwd=tmp_path, timeout=60)
    if has_nvml:
        assert proc.returncode == 0 and "GPU 0:" in proc.stdout
    else:
        assert proc.returncode == 4
        assert "no NVIDIA GPU inventory on this machine" in proc.stderr
