#!/usr/bin/env bash
# A prepared check for a real NVIDIA node (written for an H200 node; any type in
# tuner/data/gpus.csv works): what the driver reports through tuner, and what the GPU measures
# with PyTorch, beside the figures tuner plans with.
#
#   1. `tuner gpus --json`: NVML through nvidia-ml-py, the same code a study runs; exits 4 where
#      NVML is not available (no driver), and this script stops there.
#   2. HBM bandwidth (a device-to-device copy of 4 GiB: bytes read + written per second), the
#      dense BF16 matmul rate (8192^3 GEMMs) and, where the GPU has FP8 tensor cores (compute
#      capability 8.9 and later: Ada, Hopper, Blackwell), the dense FP8 e4m3 rate
#      (torch._scaled_mm, BF16 out), timed with CUDA events on GPU 0, median of 20.
#   3. A table: measured | datasheet (tuner/data/gpus.csv) | what the performance model uses
#      (datasheet x its calibrated efficiency, tuner/data/perfmodel_calibration.json) | the
#      measured share of the datasheet.
#
# Needs only tuner's wheel and its dependencies, PyTorch with CUDA and nvidia-ml-py (install
# them offline from a folder of wheels: docs/gpu-nodes.md, "GPU nodes without internet").
# Run by hand on the node:  bash bench/device_check.sh [GPU type, default: what NVML reports]
#
# `bash bench/device_check.sh --smoke [GPU type, default H200]`: what runs without a GPU, in a
# second, measuring nothing: step 1 (`tuner gpus --json`, where exit 4, no NVML, is "no GPU
# here"), the measurement script's syntax and its tuner imports (PyTorch only looked up, not
# imported), and the datasheet and model figures step 3 would compare with.
set -euo pipefail
PYTHON=${PYTHON:-python3}
TUNER=${TUNER:-tuner}

if [[ "${1:-}" == "--smoke" ]]; then
  echo "== smoke: the checks that need no GPU; nothing is measured"
  rc=0
  "$TUNER" gpus --json >/dev/null 2>&1 || rc=$?
  case $rc in
    0) echo "tuner gpus --json: a GPU is here (run without --smoke to measure it)" ;;
    4) echo "tuner gpus --json: exit 4, no NVML: no GPU here, the measurements are skipped" ;;
    *) echo "tuner gpus --json failed (exit $rc)" >&2; exit "$rc" ;;
  esac
  "$PYTHON" - "${BASH_SOURCE[0]}" "${2:-H200}" <<'SMOKE'
import importlib.util
import sys
from pathlib import Path

from tuner.plan import perfmodel as pm
from tuner.spec.gpu_types import gpu_type

text = Path(sys.argv[1]).read_text()
opening = "<<'" + "PY'\n"  # the measurement script's heredoc, as step 2 runs it
script = text.split(opening, 1)[1].split("\nPY\n", 1)[0]
compile(script, "device_check.sh (measurement script)", "exec")
torch = "installed" if importlib.util.find_spec("torch") else "NOT installed"
print(f"measurement script: compiles; its tuner imports load; PyTorch {torch}")
sheet, factors = gpu_type(sys.argv[2]), pm.load_calibration().factors
print(f"what step 3 compares with for {sheet.name} (datasheet | model):")
print(f"  HBM bandwidth, TB/s        {sheet.hbm_tb_s:10.2f} | "
      f"{sheet.hbm_tb_s * factors['bw_eff']:.2f}")
print(f"  BF16 dense matmul, TFLOP/s {sheet.bf16_dense_tflops:10.2f} | "
      f"{sheet.bf16_dense_tflops * factors['dense_eff']:.2f}")
if sheet.fp8_dense_tflops:
    print(f"  FP8 dense matmul, TFLOP/s  {sheet.fp8_dense_tflops:10.2f} | unused")
SMOKE
  exit 0
fi

echo "== tuner gpus --json"
"$TUNER" gpus --json | tee /tmp/tuner-device-check-gpus.json

echo
echo "== measured with PyTorch on GPU 0"
"$PYTHON" - "${1:-}" <<'PY'
import json
import statistics
import sys

import torch

from tuner.plan import perfmodel as pm
from tuner.spec.gpu_types import gpu_type

inventory = json.load(open("/tmp/tuner-device-check-gpus.json"))
name = sys.argv[1] or inventory["gpus"][0]["type"]
if not name:
    sys.exit(f"NVML reports {inventory['gpus'][0]['name']!r}, not a type in tuner/data/gpus.csv:"
             " pass the type to compare with, e.g. H200")
sheet = gpu_type(name)
factors = pm.load_calibration().factors
assert torch.cuda.is_available(), "PyTorch sees no CUDA device"
dev = torch.device("cuda:0")


def timed(fn, n=20):
    for _ in range(3):
        fn()
    out = []
    for _ in range(n):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end) / 1e3)
    return statistics.median(out)


src = torch.empty(4 << 30, dtype=torch.uint8, device=dev)
dst = torch.empty_like(src)
hbm_tb_s = 2 * src.numel() / timed(lambda: dst.copy_(src)) / 1e12
del src, dst
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
bf16_tflops = 2 * 8192**3 / timed(lambda: a @ b) / 1e12
rows = [("HBM bandwidth, TB/s", hbm_tb_s, sheet.hbm_tb_s, factors["bw_eff"]),
        ("BF16 dense matmul, TFLOP/s", bf16_tflops, sheet.bf16_dense_tflops,
         factors["dense_eff"])]
if sheet.fp8_dense_tflops and torch.cuda.get_device_capability(dev) >= (8, 9):
    # _scaled_mm wants the second operand column-major: b8.t() of a row-major tensor is.
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    one = torch.ones((), dtype=torch.float32, device=dev)
    fp8_tflops = 2 * 8192**3 / timed(
        lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one,
                                 out_dtype=torch.bfloat16)) / 1e12
    # The performance model plans matmuls at the BF16 rate: it has no FP8 figure to compare.
    rows.append(("FP8 dense matmul, TFLOP/s", fp8_tflops, sheet.fp8_dense_tflops, None))
print(f"{torch.cuda.get_device_name(dev)} (torch {torch.__version__}, CUDA "
      f"{torch.version.cuda}) against tuner's {sheet.name}")
print(f"{'':28} {'measured':>9} {'datasheet':>10} {'model':>9} {'measured/datasheet':>19}")
for label, got, datasheet, eff in rows:
    model = f"{datasheet * eff:9.2f}" if eff is not None else f"{'unused':>9}"
    print(f"{label:28} {got:9.2f} {datasheet:10.2f} {model} {got / datasheet:19.2f}")
print("model = datasheet x the calibrated efficiency the performance model plans with "
      f"(bw_eff {factors['bw_eff']:.3f}, dense_eff {factors['dense_eff']:.3f})")
PY
