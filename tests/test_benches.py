"""The benches under bench/ cannot rot unseen: each has a smoke mode (`--smoke`) that runs its real
code path end to end in seconds, on the fake engine where it would start vLLM, and prints its
table; the suite runs every one of them as a user would (`python -m bench.X --smoke` from the
repository's root), and a new bench without a smoke run here fails the suite. bench/ is a package
that imports tuner as installed: no bench edits sys.path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"

# What the benches import and never run alone (bench/README.md, "Helpers").
HELPERS = {"figures.py", "guidellm_client.py", "tiny_vllm.py"}
PACKAGE = {"__init__.py"}

# Each runnable bench, and a line of the table its smoke run prints (its header).
TABLE_HEADER = {
    "cpu_by_process.py": "processes     CPU-s   share",
    "cpu_layouts.py": "median tok/s   vs compute|frontend",
    "dashboard_browser.py": " run  viewer           seconds",
    "dashboard_load.py": "   page   run   cold s   warm s  elements  data",
    "device_check.sh": "what step 3 compares with for H200 (datasheet | model):",
    "first_text_lag.py": "| round | requests | first choice with empty text | no text at all |",
    "launch_stalls.py": "rounds  stalled (>300 ms)  median worst ms  worst ms",
    "loadgen_capacity.py": "| concurrency | requests | wall s | chunks/s | client CPU use ",
    "loadgen_vs_vllm_bench.py": "output tok/s  TTFT p50 ms   ITL p50 ms  TPOT p50 ms",
    "perfmodel_accuracy.py": "published predicted  error  set",
    "quality_gate_cost.py": "trial   trial s   gate s  gate/trial  verdict  config",
    "quality_near_ties.py": "configuration                    ident  tie  div  mean Δ nats",
    "round_spread.py": "spread per run (sd/mean)          tok/s per run   accepted",
    "router_policies.py": "policy        prefix-cache hits  requests per replica  TTFT p50 ms",
    "search_efficiency.py": "landscape    configs   good grid (order) full grid",
    "server_start.py": "  to ready s   to done s  server CPU-s",
    "time_to_best.py": "time to best (s)  launches  / grid  / any order  / whole grid",
    "ttft_truth.py": "client       TTFT p50 ms  excess ms  ITL p50 ms     tok/s",
    "tuner_vs_vllm_sweep.py": " seqs tokens   c",
}

# Smoke runs that start real vLLM servers (minutes): `make test-fast` leaves them out.
# tuner_vs_vllm_sweep.py compares with `vllm bench sweep serve`, which starts vLLM itself.
STARTS_VLLM = {"tuner_vs_vllm_sweep.py"}


def smoke_command(bench: str) -> list[str]:
    if bench.endswith(".sh"):
        return ["bash", f"bench/{bench}", "--smoke"]
    return [sys.executable, "-m", f"bench.{Path(bench).stem}", "--smoke"]


def smoke_env() -> dict[str, str]:
    """This Python and its venv's `tuner` for the shell benches (device_check.sh names them
    by $PYTHON and $TUNER)."""
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHON": sys.executable,
            "TUNER": str(Path(sys.executable).parent / "tuner")}


@pytest.mark.parametrize("bench", [
    pytest.param(name, marks=pytest.mark.engine) if name in STARTS_VLLM else name
    for name in TABLE_HEADER])
def test_a_bench_smoke_run_ends_well_and_prints_its_table(bench):
    timeout = 840 if bench in STARTS_VLLM else 300
    proc = subprocess.run(smoke_command(bench), cwd=REPO, env=smoke_env(), capture_output=True,
                          text=True, timeout=timeout)
    said = f"\n--- stdout:\n{proc.stdout[-4000:]}\n--- stderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"{bench} --smoke exited {proc.returncode}{said}"
    assert TABLE_HEADER[bench] in proc.stdout, f"{bench} --smoke printed no table{said}"


def test_every_runnable_bench_has_a_smoke_run_in_the_suite():
    runnable = {p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh")} - HELPERS - PACKAGE
    assert runnable - set(TABLE_HEADER) == set(), "benches with no smoke run in this file"
    assert set(TABLE_HEADER) - runnable == set(), "smoke runs of benches that are gone"


@pytest.mark.parametrize("helper", sorted(HELPERS))
def test_a_helper_is_imported_by_the_benches_and_never_run_alone(helper):
    text = (BENCH / helper).read_text()
    assert 'if __name__ == "__main__"' not in text, f"{helper} runs alone: a bench, not a helper"
    importers = [p.name for p in BENCH.glob("*.py")
                 if f"from bench.{Path(helper).stem} import" in p.read_text()]
    assert importers, f"no bench imports {helper}"


def test_no_bench_edits_the_import_path():
    edits = [f"{p.name}:{n}" for p in sorted(BENCH.glob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if "sys.path" in line]
    assert edits == [], "bench/ imports tuner as installed and its helpers as bench.NAME"
