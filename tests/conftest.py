"""Shared fixtures. Tests that start a real vLLM server are marked `engine`."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tuner.spec.yamlio import read_yaml

REPO = Path(__file__).resolve().parent.parent
TUNER = [sys.executable, "-m", "tuner.cli"]


NO_VLLM = "vLLM is not installed beside this Python: run the tests through `make test`"


# A session fixture that each pytest-xdist worker resolves for itself, not a group: the model
# is generated once for all workers (a file lock), and many quick tests read it.
PER_WORKER = {"tiny_model"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    """`make test` runs the tests on two pytest-xdist workers (`--dist loadgroup`). Tests that
    read one fixture built once per session or module (a real study, a built wheel) run on the
    same worker, so its servers start once; and the tests that start real servers go first, so
    the two workers share those and the quick tests fill in behind them."""
    for item in items:
        group = shared_fixture(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: item.get_closest_marker("engine") is None)  # a stable sort


def shared_fixture(item) -> str | None:
    """The name of the widest-scoped fixture of this project that `item` reads, beyond one test
    (session before module), or None."""
    defs = item._fixtureinfo.name2fixturedefs
    for scope in ("session", "module"):
        for name in item.fixturenames:
            fixture = defs.get(name, [None])[-1]
            # baseid: where the fixture is defined, relative to the rootdir ("" for a plugin's).
            # Not its function's module: without __init__.py files that is "conftest".
            if (fixture is not None and fixture.scope == scope and name not in PER_WORKER
                    and fixture.baseid.startswith("tests")):
                return name if scope == "session" else f"{item.module.__name__}.{name}"
    return None


@pytest.fixture
def vllm_installed() -> None:
    """Tests that start or ask the real engine fail, not skip, where it is missing: `make test`
    installs it, so its absence is a broken setup to see."""
    if not vllm_available():
        pytest.fail(NO_VLLM)


def vllm_available() -> bool:
    return shutil.which("vllm", path=str(Path(sys.executable).parent)) is not None


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny gpt-oss model, generated once per test session: by the first pytest-xdist worker
    that needs it, under a lock, in the temporary folder the session's workers share (6 s alone,
    about 19 s while the other worker starts servers). The same seed gives the same bytes."""
    from filelock import FileLock

    from tuner.serve.tiny_model import generate_tiny_gpt_oss

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # each worker's base folder lies in the session's
    model = root / "tiny-gpt-oss"
    with FileLock(root / "tiny-gpt-oss.lock"):
        if not model.exists():
            partial = root / "tiny-gpt-oss.partial"
            shutil.rmtree(partial, ignore_errors=True)
            generate_tiny_gpt_oss(partial).rename(model)  # whole, or not there
    return model


# vLLM's CPU build starts a TP1 server as three processes that each import vLLM and PyTorch in
# turn (API server, engine core, worker). With this, the worker runs inside the engine core (vLLM's
# uni executor): here 15 s and 15 CPU-s less per server start (bench/server_start.py). That
# executor does not bind the worker's threads to VLLM_CPU_OMP_THREADS_BIND's cores, but tuner holds
# each CPU server's processes to its cores (the launcher), so servers that run side by side still
# keep to a core each. Every test spec has it (`base_spec`); TP > 1 servers keep their workers.
TP1_WORKER_IN_ENGINE_CORE = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def base_spec(model: Path, space: str = "tiny-moe-cpu", **overrides) -> dict:
    """A small, fast study spec on the CPU build; `overrides` replace top-level sections."""
    spec = {
        "name": "test-study",
        "search_space": space,
        "model": {"path": str(model)},
        "engine": {
            "name": "vllm",
            "args": {"max-model-len": 256, "dtype": "bfloat16", "enforce-eager": True,
                     "enable-prefix-caching": False},
            "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
                    **TP1_WORKER_IN_ENGINE_CORE},
            "ready_timeout_s": 180,
        },
        "hardware": {"gpu_type": "cpu"},
        "workload": {"input_len": 32, "output_len": 32, "concurrency": [2, 8],
                     "requests_per_level": 16, "warmup_requests": 2},
        "sla": {"ttft_p90_ms": 5000, "min_tok_s_per_user_p90": 1},
        # Confirmation re-runs servers; the tests that are about it turn it on.
        "budget": {"n_trials": 3, "trial_timeout_s": 240, "confirm_top_k": 0},
        # The quality gate starts a reference server; the tests that are about it turn it on.
        "quality": {"enabled": False},
    }
    spec.update(overrides)
    return spec


# The suite's one real study. Three configurations on a 2-core node: two TP1 ones (batch limits 2
# and 4, each the bound of its trial's load search) and TP2 with expert parallel, which really
# crashes in vLLM's CPU fused-MoE kernel at its first request.
REAL_STUDY = "test-study"
BATCH_LIMITS = [2, 4]
REAL_SPACE = {
    "name": "real",
    "engine": "vllm",
    "parameters": {
        "tensor_parallel_size": {"values": [1, 2]},
        "max_batch_size": {"values": BATCH_LIMITS, "when": {"tensor_parallel_size": 1}},
        "enable_expert_parallel": {"values": [True], "when": {"tensor_parallel_size": 2}},
    },
}
REQUESTS_PER_LEVEL = 12


@dataclass
class Reads:
    """What the dashboard's data layer saw, reading the study in a loop while it ran."""

    count: int = 0
    seen: list[tuple[int, int]] = field(default_factory=list)  # (trials, complete) per read
    errors: list[str] = field(default_factory=list)  # any read that failed, and why


@dataclass
class RealStudy:
    folder: Path  # tuner.db, study.yaml, run.out (`tuner run`), tuner-exports/, tuner-runs/
    name: str
    reads: Reads


@pytest.fixture(scope="session")
def real_study(tmp_path_factory, tiny_model) -> RealStudy:
    """A real study that `tuner run` completed on vLLM's CPU build, read by every test that needs
    one (each real server costs tens of CPU-seconds, so the suite has one such study): the shipped
    load-search example (`concurrency: auto`) over REAL_SPACE, measured two trials at a time
    (budget.parallel_trials, each server on a core of its own) while the dashboard's data layer
    read its SQLite database in a loop; the run ended with its best two head to head, each in a
    fresh server (budget.confirm_top_k), and exported the pick."""
    if not vllm_available():
        pytest.fail(NO_VLLM)
    d = tmp_path_factory.mktemp("study")
    write_yaml(d / "space.yaml", REAL_SPACE)
    spec = read_yaml(REPO / "examples" / "tiny-moe-auto-cpu.yaml", "study spec")
    spec.update(name=REAL_STUDY, search_space="space.yaml", model={"path": str(tiny_model)},
                # This seed's grid order: the two TP1 configurations first (they run at once, a
                # core each), then TP2, which needs both cores.
                sampler={"name": "grid", "seed": 10},
                budget={"n_trials": 3, "parallel_trials": 2, "trial_timeout_s": 400,
                        "confirm_top_k": 2},
                sla={"ttft_p90_ms": 5000, "min_tok_s_per_user_p90": 1},  # met up to the bound
                # The quality gate's reference server is tested in test_e2e_quality.py.
                quality={"enabled": False})
    # The batch limit of the TP2 configuration, which does not search one: its load's bound.
    spec["engine"]["args"].update({"max-model-len": 256, "max-num-seqs": max(BATCH_LIMITS)})
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
    return RealStudy(d, REAL_STUDY, reads)


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


def wait_for(predicate, timeout: float, what: str):
    """Poll `predicate` every 0.5 s until it returns something truthy (returned), or fail
    naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str


def call_tuner(*args: str | Path, cwd: Path) -> Outcome:
    """The `tuner` command run in this process (`tuner.cli.main`, exactly what the console
    script runs), in `cwd`: its exit status and what it printed. Much faster than a subprocess
    for tests that run many commands; an exception that main() lets through (a bug) propagates.
    """
    from tuner.cli import main

    out, err = io.StringIO(), io.StringIO()
    before = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main([str(a) for a in args])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        os.chdir(before)
    return Outcome(code, out.getvalue(), err.getvalue())


def run_tuner(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([*TUNER, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


POSTGRES_ENV = "TUNER_TEST_POSTGRES_URL"


@pytest.fixture
def pg_url() -> str:
    """A fresh, empty PostgreSQL database of its own for one test (dropped afterwards), on the
    throwaway server that `.ci/with-postgres` starts (`make test` runs pytest through it)."""
    with fresh_pg_database() as url:
        yield url


@contextlib.contextmanager
def fresh_pg_database():
    """The URL of a new, empty PostgreSQL database, dropped on leaving: `pg_url`'s, and that of
    a module-scoped fixture whose study several tests read."""
    import uuid

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    base = os.environ.get(POSTGRES_ENV)
    if not base:
        pytest.fail(f"{POSTGRES_ENV} is not set: run the tests through `make test` (or "
                    "`.ci/with-postgres pytest ...`), which starts a PostgreSQL server for them")
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
