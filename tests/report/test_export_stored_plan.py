"""An export writes the launch plan stored with the trial, not one rebuilt by today's adapter."""

from __future__ import annotations

import yaml

from tests.report.test_export import LEVEL, study_store
from tuner.report.export import write_export
from tuner.report.stored_plan import deploy_plan
from tuner.serve.engines import EngineSettings, get_adapter
from tuner.serve.engines.vllm import VllmAdapter
from tuner.serve.hardware import Inventory

PARAMS = {"tensor_parallel_size": 2, "max_batch_size": 16}
GPU_NODE = Inventory(kind="gpu", type="H200", devices=tuple(range(8)), description="8x H200",
                     host="node-1")


def ran_plan(port: int = 41234, devices=(5, 6)) -> dict:
    """The plan trial 0 ran with: on GPUs 5 and 6 of its node, at a port of the tuner's."""
    settings = EngineSettings(executable="vllm", model="/models/tiny",
                              args={"max-model-len": 512}, env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    plan = get_adapter("vllm").launch_plan(PARAMS, settings, host="127.0.0.1", port=port,
                                           inventory=GPU_NODE, devices=list(devices))
    return plan.to_dict()


def stored_trial(tmp_path, plan: dict):
    store = study_store(tmp_path)
    tid = store.start_trial("s", 0, PARAMS, worker_host="node-1", worker_pid=1, gpus=2,
                            hardware={"kind": "gpu", "description": "8x H200", "host": "node-1"},
                            launch_plan=plan, log_path=str(tmp_path / "runs/s/t0/server.log"))
    store.finish_trial(tid, state="complete", objective=500.0, meets_sla=True,
                       engine_version="0.32.0", measurements=[LEVEL])
    return store.get_study("s"), store.trial("s", 0)


def test_exporting_after_an_adapter_change_still_writes_the_stored_plan(tmp_path, monkeypatch):
    plan = ran_plan()
    study, trial = stored_trial(tmp_path, plan)
    measured = yaml.safe_load(plan["files"]["config.yaml"])
    # Today's adapter writes something else for the same parameters.
    changed = VllmAdapter.engine_config
    monkeypatch.setattr(VllmAdapter, "engine_config", lambda self, *a, **k: {
        **changed(self, *a, **k), "max-num-seqs": 999, "enforce-eager": True})

    write_export(study, trial, tmp_path / "out")

    assert yaml.safe_load((tmp_path / "out" / "config.yaml").read_text()) == measured
    record = yaml.safe_load((tmp_path / "out" / "best.json").read_text())
    assert record["launch"]["config"] == measured
    # Served where a deploy serves it, on its node's first GPUs; nothing else moved.
    assert record["launch"]["command"] == ["vllm", "serve", "/models/tiny", "--config",
                                           "./config.yaml", "--host", "0.0.0.0", "--port", "8000"]
    assert record["launch"]["env"] == {"VLLM_CPU_KVCACHE_SPACE": "1", "CUDA_VISIBLE_DEVICES": "0,1"}
    script = (tmp_path / "out" / "launch.sh").read_text()
    assert "--port 8000" in script and "41234" not in script


def test_a_trial_recorded_without_a_plan_is_planned_again_by_the_adapter(tmp_path):
    study, trial = stored_trial(tmp_path, plan=None)
    write_export(study, trial, tmp_path / "out")
    config = yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())
    assert (config["tensor-parallel-size"], config["max-num-seqs"]) == (2, 16)


def test_a_containers_stored_plan_is_moved_to_the_deploys_port_devices_and_folder(tmp_path):
    settings = EngineSettings(executable="trtllm-serve", model="/models/tiny", args={}, env={},
                              container={"image": "nvcr.io/nvidia/tensorrt-llm/release:1.2.0"})
    ran_in = tmp_path / "runs/s/t0"
    plan = get_adapter("trtllm").launch_plan(
        {"tensor_parallel_size": 2}, settings, host="127.0.0.1", port=41234, inventory=GPU_NODE,
        devices=[5, 6], workdir=str(ran_in)).to_dict()
    store = study_store(tmp_path)
    store.start_trial("s", 0, {"tensor_parallel_size": 2}, worker_host="h", worker_pid=1,
                      gpus=2, launch_plan=plan, log_path=str(ran_in / "server.log"))
    trial = store.trial("s", 0)
    moved = deploy_plan(store.get_study("s"), trial, host="0.0.0.0", port=8000,
                        workdir=str(tmp_path / "out"))
    argv = moved.argv
    assert argv[argv.index("-p") + 1] == "8000:8000"
    assert argv[argv.index("--gpus") + 1] == '"device=0,1"'
    assert argv[argv.index("--port") + 1] == "8000"
    assert any(a.startswith(f"{tmp_path / 'out'}:") for a in argv)
    assert str(ran_in) not in " ".join(argv) and "41234" not in " ".join(argv)
    assert moved.files == plan["files"]
