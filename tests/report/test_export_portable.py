"""An export runs on another machine: its launch script finds the engine on PATH (or
$TUNER_ENGINE) and the model the spec named (or $TUNER_MODEL), and no path of the study's
machine is in any exported file unless the spec gave it."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import psutil

from tests.report.test_export import LEVEL, SPEC
from tuner.report.export import write_export
from tuner.serve.engines import EngineSettings, get_adapter
from tuner.serve.hardware import Inventory
from tuner.serve.launcher import free_port, port_is_free
from tuner.store import Store
from tuner.testing.fake_engine import LANDSCAPE_ENV, fake_model, fake_vllm

STUDY_MACHINE = "/home/study-machine/clone"


def exported(tmp_path: Path, replicas: int = 1, formats: tuple[str, ...] | None = None) -> Path:
    """The export of a trial run on a study machine whose engine and model live in its clone,
    from a spec that named the model `models/tiny` and no executable: one TP1 server, or
    `replicas` of them (a core each) behind the router, round robin."""
    spec = {**SPEC, "engine": {k: v for k, v in SPEC["engine"].items() if k != "executable"},
            "model": {"path": "models/tiny"}}
    store = Store.open(f"sqlite:///{tmp_path}/tuner.db")
    store.ensure_study("s", engine="vllm", model=f"{STUDY_MACHINE}/models/tiny",
                       gpu_type="cpu", spec=spec, space={}, tuner_version="test")
    settings = EngineSettings(executable=f"{STUDY_MACHINE}/.venv/bin/vllm",
                              model=f"{STUDY_MACHINE}/models/tiny",
                              args=dict(SPEC["engine"]["args"]), env=dict(SPEC["engine"]["env"]))
    params = {"tensor_parallel_size": 1, "max_batch_size": 4}
    # A trial of replicas stores the first replica's command, at the router's address.
    ran_in = f"{STUDY_MACHINE}/tuner-runs/s/trial-0000" + ("/replica-1" if replicas > 1 else "")
    plan = get_adapter("vllm").launch_plan(
        params, settings, host="127.0.0.1", port=41234,
        inventory=Inventory(kind="cpu", type="cpu", devices=(0, 1), description="2 cores",
                            host="h"),
        devices=[0], workdir=ran_in)
    if replicas > 1:
        params = {**params, "replicas": replicas, "router_policy": "round_robin"}
    tid = store.start_trial("s", 0, params, worker_host="h", worker_pid=1, gpus=replicas,
                            launch_plan=dataclasses.asdict(plan), log_path=f"{ran_in}/server.log")
    store.finish_trial(tid, state="complete", objective=500.0, meets_sla=True,
                       measurements=[LEVEL])
    out = tmp_path / "export"
    try:
        write_export(store.get_study("s"), store.trials("s")[0], out, formats)
    finally:
        store.close()
    return out


def first_answer(launched: subprocess.Popen, port: int, model: Path,
                 within_s: float) -> int | None:
    """The HTTP status of the first completion the launched export answers on `port`, asked
    every 0.1 s while it starts; fails with its output if it exits first, None if it never
    answers in time."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions", method="POST",
            data=json.dumps({"model": str(model), "prompt": "hello", "max_tokens": 4}).encode(),
            headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=5) as r:
                return r.status
        except OSError:
            assert launched.poll() is None, launched.stdout.read().decode()
            time.sleep(0.1)
    return None


def test_no_path_of_the_study_machine_is_in_an_exported_file(tmp_path: Path):
    out = exported(tmp_path)
    for f in out.iterdir():
        assert STUDY_MACHINE not in f.read_text(), f.name
    record = json.loads((out / "best.json").read_text())
    assert record["model"] == "models/tiny"
    assert record["launch"]["command"][:3] == ["vllm", "serve", "models/tiny"]
    script = (out / "launch.sh").read_text()
    assert 'TUNER_ENGINE="${TUNER_ENGINE:-vllm}"' in script
    assert 'TUNER_MODEL="${TUNER_MODEL:-models/tiny}"' in script


def test_the_export_copied_elsewhere_serves_with_the_engine_on_path(tmp_path: Path):
    deploy = tmp_path / "elsewhere" / "deploy"
    shutil.copytree(exported(tmp_path), deploy)
    engine_bin = fake_vllm(tmp_path / "elsewhere" / "bin")
    model = fake_model(tmp_path / "elsewhere" / "tiny")
    (tmp_path / "landscape.json").write_text(json.dumps({"default": {"ttft_s": 0.0}}))
    port = free_port()
    env = {**os.environ, "PATH": f"{engine_bin.parent}:{os.environ['PATH']}",
           "TUNER_MODEL": str(model), LANDSCAPE_ENV: str(tmp_path / "landscape.json")}
    env.pop("TUNER_ENGINE", None)
    server = subprocess.Popen([str(deploy / "launch.sh"), "--port", str(port)], env=env,
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        # A minute at most: the stand-in is up in about a second.
        assert first_answer(server, port, model, within_s=60) == 200
        # The engine from PATH, serving the model TUNER_MODEL named.
        command = psutil.Process(server.pid).cmdline()
        assert str(model) in command and "serve" in command
    finally:
        server.kill()
        server.wait()


def test_a_winner_of_replicas_exports_its_router_and_a_script_that_starts_them_all(
        tmp_path: Path):
    out = exported(tmp_path, 2)
    record = json.loads((out / "best.json").read_text())
    router = record["launch"]["router"]
    assert (router["name"], router["policy"], router["replicas"]) == (
        "vllm-router", "round_robin", 2)
    assert router["command"][:4] == ["vllm-router", "--worker-urls", "http://127.0.0.1:8001",
                                     "http://127.0.0.1:8002"]
    assert "--disable-retries" not in router["command"]  # a deployment keeps the router's
    for f in out.iterdir():
        assert STUDY_MACHINE not in f.read_text(), f.name


def test_the_replicas_export_copied_elsewhere_serves_through_the_real_router(tmp_path: Path):
    import signal

    from tuner.serve.routers import find_executable

    router = find_executable("vllm-router")
    assert router, "vllm-router is not installed: `make install` installs tuner's router extra"
    deploy = tmp_path / "elsewhere" / "deploy"
    shutil.copytree(exported(tmp_path, 2), deploy)
    engine_bin = fake_vllm(tmp_path / "elsewhere" / "bin")
    model = fake_model(tmp_path / "elsewhere" / "tiny")
    (tmp_path / "landscape.json").write_text(json.dumps({"default": {"ttft_s": 0.0}}))
    port = free_port()
    while not all(port_is_free("127.0.0.1", port + i) for i in (1, 2)):
        port = free_port()
    env = {**os.environ, "TUNER_MODEL": str(model), "TUNER_PORT": str(port),
           "PATH": f"{engine_bin.parent}:{Path(router).parent}:{os.environ['PATH']}",
           LANDSCAPE_ENV: str(tmp_path / "landscape.json")}
    for name in ("TUNER_ENGINE", "TUNER_ROUTER"):
        env.pop(name, None)
    script = subprocess.Popen([str(deploy / "launch.sh")], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        # Two minutes at most: the router waits for both replicas.
        assert first_answer(script, port, model, within_s=120) == 200
        members = psutil.Process(script.pid).children(recursive=True)
        commands = [" ".join(p.cmdline()) for p in members]
        assert sum("tuner.testing.fake_engine" in c for c in commands) == 2, commands
        # The router retitles its process; its policy is the one the trial measured.
        assert any(c.startswith("vllm::router") for c in commands), commands
        assert "--policy round_robin" in (deploy / "launch.sh").read_text()
        # One member that exits ends the deployment: the script stops the others.
        engine = next(p for p in members if "tuner.testing.fake_engine" in " ".join(p.cmdline()))
        engine.kill()
        assert script.wait(timeout=30) != 0
        psutil.wait_procs(members, timeout=10)
        assert not [p for p in members if p.is_running() and p.status() != "zombie"]
    finally:
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGKILL)
        script.wait()


def test_the_dashboard_card_of_a_replicas_winner_shows_every_member(tmp_path: Path):
    from tuner.report import dashboard_data as dd

    exported(tmp_path, 2)
    with dd.open_store(f"sqlite:///{tmp_path}/tuner.db") as store:
        card = dd.best_card(dd.read_study(store, "s"))
    assert card.command.count("vllm serve models/tiny") == 1  # one replica's command, shared
    assert "2 replicas" in card.command
    assert "vllm-router --worker-urls http://127.0.0.1:8001 http://127.0.0.1:8002 --policy " \
           "round_robin" in card.command
