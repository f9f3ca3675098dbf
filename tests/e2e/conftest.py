"""One real study that several engine tests read, so its servers start once per session.

`parallel_study`: three TP1 configurations (batch limits 2, 4 and 8) of the shipped load-search
example (`concurrency: auto`: each trial searches its load up to its batch limit), which `tuner
run` measured two at a time (budget.parallel_trials: each server on a core of its own) while the
dashboard's data layer read the study's SQLite database in a loop; the run ended by confirming
its best two, each in a fresh server (budget.confirm_top_k). The tests of confirmation
(test_e2e_confirm.py), of parallel trials (test_e2e_interrupt.py), of the load search
(test_e2e_load_search.py) and of reading a running study (test_e2e_workers.py) check it.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import (
    NO_VLLM,
    REPO,
    TP1_WORKER_IN_ENGINE_CORE,
    TUNER,
    vllm_available,
    wait_for,
    write_yaml,
)
from tuner.spec.yamlio import read_yaml

PARALLEL_STUDY = "parallel-study"
# Three configurations that all run on the CPU build: only the batch limit, the bound of each
# trial's load search, differs.
BATCH_LIMITS = [2, 4, 8]
SPACE = {"name": "three", "engine": "vllm",
         "parameters": {"tensor_parallel_size": {"values": [1]},
                        "max_batch_size": {"values": BATCH_LIMITS}}}
REQUESTS_PER_LEVEL = 12


@dataclass
class Reads:
    """What the dashboard's data layer saw, reading the study in a loop while it ran."""

    count: int = 0
    seen: list[tuple[int, int]] = field(default_factory=list)  # (trials, complete) per read
    errors: list[str] = field(default_factory=list)  # any read that failed, and why


@dataclass
class ParallelStudy:
    folder: Path  # tuner.db, study.yaml, run.out (`tuner run`)
    name: str
    reads: Reads


@pytest.fixture(scope="session")
def parallel_study(tmp_path_factory, tiny_model) -> ParallelStudy:
    if not vllm_available():
        pytest.fail(NO_VLLM)
    d = tmp_path_factory.mktemp("parallel")
    write_yaml(d / "space.yaml", SPACE)
    spec = read_yaml(REPO / "examples" / "tiny-moe-auto-cpu.yaml", "study spec")
    spec.update(name=PARALLEL_STUDY, search_space="space.yaml", model={"path": str(tiny_model)},
                sampler={"name": "grid", "seed": 0},
                budget={"n_trials": 3, "parallel_trials": 2, "trial_timeout_s": 400,
                        "confirm_top_k": 2},
                sla={"ttft_p90_ms": 5000, "min_tok_s_per_user_p90": 1},  # met up to the bound
                # The quality gate's reference server is tested in test_e2e_quality.py.
                quality={"enabled": False})
    spec["engine"]["args"]["max-model-len"] = 256
    spec["engine"]["env"].update(TP1_WORKER_IN_ENGINE_CORE)
    spec["workload"].update(input_len=32, output_len=32, requests_per_level=REQUESTS_PER_LEVEL,
                            max_rounds=1, warmup_requests=2)
    write_yaml(d / "study.yaml", spec)
    with open(d / "run.out", "w") as out:
        run = subprocess.Popen([*TUNER, "run", "study.yaml"], cwd=d, stdout=out,
                               stderr=subprocess.STDOUT,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        reads = read_while_running(run, d)
    finally:
        if run.poll() is None:
            run.kill()
        run.wait()
    assert run.returncode == 0, (d / "run.out").read_text()[-3000:]
    return ParallelStudy(d, PARALLEL_STUDY, reads)


# A pause between reads, about a viewer's refresh rate. Without one the loop kept
# three quarters of a core busy (76 CPU-s over a 101 s study, 656 reads), beside the two servers
# bound to the two cores, and slowed the study it watches.
READ_EVERY_S = 0.5


def read_while_running(run: subprocess.Popen, d: Path) -> Reads:
    """Every page's data, read from the study's database again and again until `run` ends."""
    from tuner.report import dashboard_data as dd

    url = f"sqlite:///{d}/tuner.db"
    reads = Reads()
    wait_for(lambda: (d / "tuner.db").exists(), 120, "the study database")
    while run.poll() is None:
        try:
            store = dd.open_store(url)
        except Exception as e:  # only before the study's tables exist
            if "no study database" not in str(e):
                reads.errors.append(f"open: {e!r}")
            time.sleep(0.2)
            continue
        try:
            with store:
                for data in dd.read_studies(store):
                    dd.summarize(data)
                    dd.trials_frame(data)
                    dd.measured_points(data)
                    dd.progress_frame(data)
                    dd.failure_groups(data)
                    dd.param_importances(data)
                    complete = sum(t.state == "complete" for t in data.trials)
                    reads.seen.append((len(data.trials), complete))
        except Exception as e:
            reads.errors.append(f"read: {e!r}")
        reads.count += 1
        time.sleep(READ_EVERY_S)
    return reads
