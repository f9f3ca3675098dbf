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
from tuner.serve.launcher import free_port
from tuner.store import Store
from tuner.testing.fake_engine import LANDSCAPE_ENV, fake_model, fake_vllm

STUDY_MACHINE = "/home/study-machine/clone"


def exported(tmp_path: Path) -> Path:
    """The export of a trial run on a study machine whose engine and model live in its clone,
    from a spec that named the model `models/tiny` and no executable."""
    spec = {**SPEC, "engine": {k: v for k, v in SPEC["engine"].items() if k != "executable"},
            "model": {"path": "models/tiny"}}
    store = Store.open(f"sqlite:///{tmp_path}/tuner.db")
    store.ensure_study("s", engine="vllm", model=f"{STUDY_MACHINE}/models/tiny",
                       gpu_type="cpu", spec=spec, space={}, tuner_version="test")
    settings = EngineSettings(executable=f"{STUDY_MACHINE}/.venv/bin/vllm",
                              model=f"{STUDY_MACHINE}/models/tiny",
                              args=dict(SPEC["engine"]["args"]), env=dict(SPEC["engine"]["env"]))
    params = {"tensor_parallel_size": 1, "max_batch_size": 4}
    plan = get_adapter("vllm").launch_plan(
        params, settings, host="127.0.0.1", port=41234,
        inventory=Inventory(kind="cpu", type="cpu", devices=(0, 1), description="2 cores",
                            host="h"),
        devices=[0], workdir=f"{STUDY_MACHINE}/tuner-runs/s/trial-0000")
    tid = store.start_trial("s", 0, params, worker_host="h", worker_pid=1, gpus=1,
                            launch_plan=dataclasses.asdict(plan),
                            log_path=f"{STUDY_MACHINE}/tuner-runs/s/trial-0000/server.log")
    store.finish_trial(tid, state="complete", objective=500.0, meets_sla=True,
                       measurements=[LEVEL])
    out = tmp_path / "export"
    write_export(store.get_study("s"), store.trials("s")[0], out)
    store.close()
    return out


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
        answer = None
        for _ in range(600):  # a minute at most: the stand-in is up in about a second
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/v1/completions", method="POST",
                    data=json.dumps({"model": str(model), "prompt": "hello",
                                     "max_tokens": 4}).encode(),
                    headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=5) as r:
                    answer = r.status, r.read()
                break
            except OSError:
                assert server.poll() is None, server.stdout.read().decode()
                time.sleep(0.1)
        assert answer is not None and answer[0] == 200
        # The engine from PATH, serving the model TUNER_MODEL named.
        command = psutil.Process(server.pid).cmdline()
        assert str(model) in command and "serve" in command
    finally:
        server.kill()
        server.wait()
