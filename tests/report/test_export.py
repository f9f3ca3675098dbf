"""Exports are derived from stored trials alone and carry what a deploy needs."""

from __future__ import annotations

import json
import stat
from dataclasses import replace
from types import SimpleNamespace

import pytest
import yaml

from tests.conftest import call_tuner
from tuner.report.export import ExportRecord, write_export
from tuner.serve.engines import get_adapter
from tuner.spec.errors import NoResult
from tuner.store import Store
from tuner.store.records import LevelMeasurement
from tuner.verdict.rules import winner

LEVEL = LevelMeasurement(
    concurrency=4, requests=16, errors=0, duration_s=2.0, input_tokens=512, output_tokens=1024,
    request_throughput=8.0, output_tok_s=512.0, output_tok_s_per_gpu=256.0, ttft_p50_ms=20.0,
    ttft_p90_ms=30.0, ttft_p99_ms=35.0, itl_p50_ms=5.0, itl_p90_ms=8.0, itl_p99_ms=9.0,
    tpot_p50_ms=6.0, tpot_p90_ms=7.0, e2e_p50_ms=400.0, e2e_p90_ms=450.0,
    tok_s_per_user_p50=160.0, tok_s_per_user_p90=140.0, goodput_rps=8.0, meets_sla=True)
SPEC = {
    "engine": {"name": "vllm", "executable": "vllm", "args": {"max-model-len": 512},
               "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}},
    "workload": {"input_len": 32, "output_len": 64, "concurrency": [4]},
    "sla": {"ttft_p90_ms": 100.0, "min_tok_s_per_user_p90": 50.0},
    "objective": {"metric": "output_tok_s_per_gpu"},
}


def add_trial(store, number, params, objective, meets, gpus=2):
    tid = store.start_trial("s", number, params, worker_host="h", worker_pid=1,
                            gpus=gpus, hardware={"kind": "cpu", "description": "2 cores",
                                                 "host": "h"})
    level = replace(LEVEL, output_tok_s_per_gpu=objective, meets_sla=meets)
    store.finish_trial(tid, state="complete", objective=objective, meets_sla=meets,
                       engine_version="0.32.0", measurements=[level])


def study_store(tmp_path) -> Store:
    """A store with study `s` of the vLLM engine and no trial yet."""
    s = Store.open(f"sqlite:///{tmp_path}/tuner.db")
    s.ensure_study("s", engine="vllm", model="/models/tiny", gpu_type="cpu", spec=SPEC,
                   space={}, tuner_version="test")
    return s


@pytest.fixture
def store(tmp_path):
    return study_store(tmp_path)


def test_the_best_trial_is_the_fastest_that_met_the_sla(store):
    add_trial(store, 0, {"tensor_parallel_size": 1, "max_batch_size": 4}, 300.0, True, gpus=1)
    add_trial(store, 1, {"tensor_parallel_size": 2, "max_batch_size": 16}, 900.0, False)
    add_trial(store, 2, {"tensor_parallel_size": 2, "max_batch_size": 64}, 500.0, True)
    assert winner(store.get_study("s"), store.trials("s")).number == 2


def test_no_trial_met_the_sla_is_a_clear_no_result(store, tmp_path):
    add_trial(store, 0, {"max_batch_size": 4}, 900.0, False)
    with pytest.raises(NoResult, match="no trial that met the SLA"):
        winner(store.get_study("s"), store.trials("s"))
    for command in (["best"], ["export"]):
        proc = call_tuner(*command, cwd=tmp_path)
        assert proc.code == 3, proc.stderr
        assert "no trial that met the SLA" in proc.stderr
    assert not (tmp_path / "tuner-exports").exists()


def test_the_vllm_export_is_the_trials_config_and_a_launch_script(store, tmp_path):
    add_trial(store, 0, {"tensor_parallel_size": 2, "max_batch_size": 16,
                         "speculative_method": "ngram", "num_speculative_tokens": 2}, 500.0, True)
    study, trials = store.get_study("s"), store.trials("s")
    files = write_export(study, winner(study, trials), tmp_path / "out")
    assert sorted(f.name for f in files) == ["best.json", "config.yaml", "launch.sh"]

    config = yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())
    assert config == {"max-model-len": 512, "tensor-parallel-size": 2, "max-num-seqs": 16,
                      "speculative-config": {"method": "ngram", "num_speculative_tokens": 2}}
    script = (tmp_path / "out" / "launch.sh").read_text()
    assert '"$TUNER_ENGINE" serve "$TUNER_MODEL" --config ./config.yaml --host 0.0.0.0 --port ' \
        '8000' in script
    assert 'TUNER_ENGINE="${TUNER_ENGINE:-vllm}"' in script
    assert 'TUNER_MODEL="${TUNER_MODEL:-/models/tiny}"' in script
    assert "VLLM_CPU_KVCACHE_SPACE=1" in script
    # The trial's cores stay behind: a deploy binds its own (or the user's setting passes on).
    assert "VLLM_CPU_OMP_THREADS_BIND" not in script
    assert (tmp_path / "out" / "launch.sh").stat().st_mode & stat.S_IXUSR


def test_the_json_record_is_versioned_and_carries_measurements_and_provenance(store, tmp_path):
    add_trial(store, 0, {"tensor_parallel_size": 1, "max_batch_size": 4}, 256.0, True, gpus=1)
    study = store.get_study("s")
    write_export(study, store.trials("s")[0], tmp_path, ("json",))
    record = json.loads((tmp_path / "best.json").read_text())
    ExportRecord.model_validate(record)  # the record satisfies its own schema
    assert record["schema_version"] == 8
    assert record["engine"] == {"name": "vllm", "version": "0.32.0"}
    assert record["hardware"]["gpus"] == 1 and record["hardware"]["gpu_type"] == "cpu"
    assert record["measurements"][0]["output_tok_s_per_gpu"] == 256.0
    # The spec sets no hardware.gpu_hour_usd: the table's example core-hour, times 1 core.
    core_hour = 0.0408
    usd_per_mtok = core_hour * 1 / (LEVEL.output_tok_s * 3600) * 1e6
    assert record["objective"] == {
        "metric": "output_tok_s_per_gpu", "value": 256.0, "meets_sla": True, "concurrency": 4,
        "tok_s_per_user_p90": LEVEL.tok_s_per_user_p90, "min_tok_s_per_user": None,
        "source": "first run", "usd_per_mtok": pytest.approx(usd_per_mtok)}
    assert record["measurements"][0]["usd_per_mtok"] == pytest.approx(usd_per_mtok)
    price = record["price"]
    assert (price["usd_per_device_hour"], price["devices"], price["example"]) == (core_hour, 1,
                                                                                   True)
    assert price["usd_per_server_hour"] == pytest.approx(core_hour)
    assert "EXAMPLE" in price["source"]
    assert record["workload"]["output_len"] == 64 and record["sla"]["ttft_p90_ms"] == 100.0
    prov = record["provenance"]
    assert prov["study"] == "s" and prov["trial"] == 0
    assert prov["measured_at"] and prov["exported_at"] and prov["tuner_version"]
    assert record["launch"]["command"][:3] == ["vllm", "serve", "/models/tiny"]


GPU_SPEC = {**SPEC, "engine": {"name": "vllm", "executable": "vllm",
                               "args": {"max-model-len": 10240}, "env": {},
                               "draft_model": "nvidia/gpt-oss-120b-Eagle3-v3"}}


@pytest.fixture
def gpu_store(tmp_path):
    s = Store.open(f"sqlite:///{tmp_path}/gpu.db")
    s.ensure_study("g", engine="vllm", model="openai/gpt-oss-120b", gpu_type="H200",
                   spec=GPU_SPEC, space={}, tuner_version="test")
    return s


def add_gpu_trial(store, params, gpus, version="0.32.0"):
    tid = store.start_trial("g", 0, params, worker_host="h", worker_pid=1, gpus=gpus,
                            hardware={"kind": "gpu", "description": "8 x H200", "host": "h"})
    store.finish_trial(tid, state="complete", objective=5000.0, meets_sla=True,
                       engine_version=version, measurements=[LEVEL])
    return store.trials("g")[0]


def test_the_k8s_export_is_a_valid_deployment_of_the_exact_config(gpu_store, tmp_path):
    import kubernetes_validate

    params = {"tensor_parallel_size": 2, "data_parallel_size": 2, "enable_expert_parallel": True,
              "max_batch_size": 256, "moe_backend": "triton"}
    trial = add_gpu_trial(gpu_store, params, gpus=4)
    write_export(gpu_store.get_study("g"), trial, tmp_path, ("vllm", "k8s"))
    docs = list(yaml.safe_load_all((tmp_path / "k8s.yaml").read_text()))
    assert [d["kind"] for d in docs] == ["ConfigMap", "Deployment", "Service"]
    for d in docs:  # the Kubernetes API's own schemas, strict: no unknown field anywhere
        kubernetes_validate.validate(d, "1.33", strict=True)
    config_map, deployment, _ = docs
    assert config_map["data"]["config.yaml"] == (tmp_path / "config.yaml").read_text()
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "vllm/vllm-openai:v0.32.0"
    assert container["command"] == ["vllm", "serve", "openai/gpt-oss-120b", "--config",
                                    "/config/config.yaml", "--host", "0.0.0.0", "--port", "8000"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert all(e["name"] != "CUDA_VISIBLE_DEVICES" for e in container["env"])


@pytest.mark.parametrize("params, gpus, problem", [
    ({"tensor_parallel_size": 4}, 2, "need 4 GPUs, the record says 2"),
    ({"tensor_parallel_size": 1, "max_batch_size": 64, "speculative_method": "eagle3",
      "num_speculative_tokens": 3}, 1, "a draft length without a draft model"),
])
def test_an_export_that_would_not_deploy_is_refused_before_writing(
        gpu_store, tmp_path, params, gpus, problem):
    from tuner.spec.errors import BadInput

    study = gpu_store.get_study("g")
    if "eagle3" in params.values():  # the study lost its draft model
        study.spec["engine"]["draft_model"] = None
    trial = add_gpu_trial(gpu_store, params, gpus=gpus)
    with pytest.raises(BadInput, match=problem):
        write_export(study, trial, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cuda_graph_sizes_are_checked_sorted_unique_and_within_the_batch():
    from tuner.report.export_checks import check_invariants
    from tuner.spec.errors import BadInput

    record = SimpleNamespace(
        trial=0, hardware=SimpleNamespace(gpu_type="H200", gpus=1),
        parameters={"tensor_parallel_size": 1, "max_batch_size": 64},
        launch=SimpleNamespace(config={"cuda_graph_config": {"batch_sizes": [1, 2, 2, 128]}}))
    with pytest.raises(BadInput) as e:
        check_invariants(record, get_adapter("vllm"))
    assert "sorted and unique" in str(e.value) and "above the max batch size 64" in str(e.value)
    record.launch.config = {"cuda_graph_config": {"batch_sizes": [1, 2, 4, 64]}}
    check_invariants(record, get_adapter("vllm"))


def test_vllms_token_counted_capture_sizes_may_exceed_the_batch_as_its_recipe_does():
    from tuner.report.export_checks import check_invariants
    from tuner.spec.errors import BadInput

    record = SimpleNamespace(
        trial=0, hardware=SimpleNamespace(gpu_type="H200", gpus=1),
        parameters={"tensor_parallel_size": 1, "max_batch_size": 512},
        launch=SimpleNamespace(config={"max-cudagraph-capture-size": 2048,
                                       "cudagraph-capture-sizes": [1, 8, 512, 2048]}))
    check_invariants(record, get_adapter("vllm"))  # the recipe's 2048 at 512 sequences
    record.launch.config = {"cudagraph-capture-sizes": [8, 1]}
    with pytest.raises(BadInput, match="sorted and unique"):
        check_invariants(record, get_adapter("vllm"))


def test_the_shipped_json_schema_is_current_and_describes_real_records(store, tmp_path):
    import jsonschema

    from tuner.report.export import SCHEMA_FILE, json_schema

    shipped = json.loads(SCHEMA_FILE.read_text())
    assert shipped == json_schema(), "regenerate it: python -m tuner.report.export"
    add_trial(store, 0, {"tensor_parallel_size": 1, "max_batch_size": 4}, 256.0, True, gpus=1)
    write_export(store.get_study("s"), store.trials("s")[0], tmp_path, ("json",))
    record = json.loads((tmp_path / "best.json").read_text())
    jsonschema.validate(record, shipped)
    record["schema_version"] = 9
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(record, shipped)


# ----------------------------------------------------------------- Kubernetes, structurally


def structural_problems(pod: dict, command: list[str], env: dict[str, str]) -> list[str]:
    """What would stop the pod from running its engine: a container runtime as the command, a
    path the command reads that nothing mounts, a variable of the plan missing."""
    (container,) = pod["containers"]
    problems = []
    if container["command"] != command:
        problems.append(f"command {container['command']}")
    if container["command"][0] in ("docker", "podman"):
        problems.append("a container runtime inside the image")
    mounts = [m["mountPath"] for m in container["volumeMounts"]]
    volumes = {v["name"] for v in pod["volumes"]}
    problems += [f"unmounted {a}" for a in container["command"]
                 if a.startswith("/") and not any(a.startswith(m.rstrip("/") + "/") or a == m
                                                  for m in mounts)]
    problems += [f"volume {m['name']} not in the pod" for m in container["volumeMounts"]
                 if m["name"] not in volumes]
    have = {e["name"]: e.get("value") for e in container["env"]}
    problems += [f"env {k}" for k, v in env.items()
                 if k != "CUDA_VISIBLE_DEVICES" and have.get(k) != v]
    return problems


TRT_SPEC = {**SPEC, "engine": {
    "name": "trtllm", "container": {"runtime": "docker",
                                    "image": "nvcr.io/nvidia/tensorrt-llm/release:1.2.1"},
    "args": {"trust_remote_code": True, "env_overrides": {"TRTLLM_ENABLE_PDL": 1}},
    "env": {"NCCL_DEBUG": "WARN"}}}


def k8s_export(tmp_path, engine, spec, gpu_type, params, gpus, formats):
    store = Store.open(f"sqlite:///{tmp_path}/k8s.db")
    store.ensure_study("k", engine=engine, model="openai/gpt-oss-120b", gpu_type=gpu_type,
                       spec=spec, space={}, tuner_version="test")
    tid = store.start_trial("k", 0, params, worker_host="h", worker_pid=1, gpus=gpus,
                            hardware={"kind": "gpu", "description": gpu_type, "host": "h"})
    store.finish_trial(tid, state="complete", objective=5000.0, meets_sla=True,
                       engine_version="1.2.1", measurements=[LEVEL])
    write_export(store.get_study("k"), store.trials("k")[0], tmp_path, formats)
    return [d for d in yaml.safe_load_all((tmp_path / "k8s.yaml").read_text()) if d]


def test_a_trtllm_deployment_runs_trtllm_serve_with_every_mount_and_variable(tmp_path):
    import kubernetes_validate

    params = {"tensor_parallel_size": 8, "expert_parallel_size": 8, "enable_attention_dp": True,
              "moe_backend": "CUTLASS", "max_batch_size": 512}
    docs = k8s_export(tmp_path, "trtllm", TRT_SPEC, "B200", params, 8, ("trtllm", "k8s", "json"))
    for d in docs:
        kubernetes_validate.validate(d, "1.33", strict=True)
    config_map, deployment, _ = docs
    pod = deployment["spec"]["template"]["spec"]
    record = json.loads((tmp_path / "best.json").read_text())
    command = ["trtllm-serve", "openai/gpt-oss-120b", "--host", "0.0.0.0", "--port", "8000",
               "--backend", "pytorch", "--config", "/config/extra-llm-api-config.yaml"]
    assert structural_problems(pod, command, record["launch"]["env"]) == []
    assert record["launch"]["env"] == {"NCCL_DEBUG": "WARN"}
    assert config_map["data"]["extra-llm-api-config.yaml"] == (
        tmp_path / "extra-llm-api-config.yaml").read_text()
    (container,) = pod["containers"]
    assert container["image"] == "nvcr.io/nvidia/tensorrt-llm/release:1.2.1"
    assert {"name": "model-cache", "mountPath": "/root/.cache/huggingface"} in (
        container["volumeMounts"])
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "tuner-model-cache"}} \
        in pod["volumes"]
    # The launch script, by contrast, runs the image with docker and passes the env into it.
    launch = (tmp_path / "launch.sh").read_text()
    assert "docker run" in launch and "-e NCCL_DEBUG" in launch


def test_the_structural_check_catches_docker_a_missing_mount_and_a_missing_variable():
    pod = {"containers": [{"command": ["docker", "run", "/tuner/x.yaml"], "env": [],
                           "volumeMounts": [{"name": "config", "mountPath": "/config"}]}],
           "volumes": [{"name": "config"}]}
    found = structural_problems(pod, ["trtllm-serve"], {"NCCL_DEBUG": "WARN"})
    assert found == ["command ['docker', 'run', '/tuner/x.yaml']",
                     "a container runtime inside the image", "unmounted /tuner/x.yaml",
                     "env NCCL_DEBUG"]


def test_a_vllm_deployment_passes_the_structural_check(gpu_store, tmp_path):
    params = {"tensor_parallel_size": 4, "max_batch_size": 256, "moe_backend": "triton"}
    trial = add_gpu_trial(gpu_store, params, gpus=4)
    write_export(gpu_store.get_study("g"), trial, tmp_path, ("k8s", "json"))
    _, deployment, _ = yaml.safe_load_all((tmp_path / "k8s.yaml").read_text())
    record = json.loads((tmp_path / "best.json").read_text())
    command = ["vllm", "serve", "openai/gpt-oss-120b", "--config", "/config/config.yaml",
               "--host", "0.0.0.0", "--port", "8000"]
    assert structural_problems(deployment["spec"]["template"]["spec"], command,
                               record["launch"]["env"]) == []


def test_on_gb200_every_manifest_asks_one_compute_tray_of_4_gpus(tmp_path):
    from tuner.report.k8s import workers_job

    params = {"tensor_parallel_size": 4, "expert_parallel_size": 4, "moe_backend": "TRTLLM",
              "max_batch_size": 256}
    docs = k8s_export(tmp_path, "trtllm", TRT_SPEC, "GB200", params, 4, ("k8s",))
    (container,) = docs[1]["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 4
    for devices in (None, 8, 4):
        job = workers_job(study="k", workers=2, image="i", gpu_type="GB200", devices=devices,
                          model="openai/gpt-oss-120b")
        (worker,) = job["spec"]["template"]["spec"]["containers"]
        assert worker["resources"]["limits"]["nvidia.com/gpu"] == 4
        assert {"name": "HF_HOME", "value": "/root/.cache/huggingface"} in worker["env"]
    h200 = workers_job(study="k", workers=2, image="i", gpu_type="H200", devices=None)
    assert h200["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": 8}


def test_the_k8s_export_of_replicas_is_a_stateful_set_behind_the_router_and_its_service(
        gpu_store, tmp_path):
    import kubernetes_validate

    params = {"tensor_parallel_size": 2, "max_batch_size": 256, "replicas": 2,
              "router_policy": "cache_aware"}
    trial = add_gpu_trial(gpu_store, params, gpus=4)
    write_export(gpu_store.get_study("g"), trial, tmp_path, ("vllm", "json", "k8s"),
                 router_image="registry.example/vllm-router:0.1.17")
    docs = list(yaml.safe_load_all((tmp_path / "k8s.yaml").read_text()))
    assert [d["kind"] for d in docs] == ["ConfigMap", "StatefulSet", "Service", "Deployment",
                                         "Service"]
    for d in docs:  # the Kubernetes API's own schemas, strict: no unknown field anywhere
        kubernetes_validate.validate(d, "1.33", strict=True)
    config_map, replicas, members, router, front = docs
    assert config_map["data"]["config.yaml"] == (tmp_path / "config.yaml").read_text()
    assert replicas["spec"]["replicas"] == 2
    engine = replicas["spec"]["template"]["spec"]["containers"][0]
    assert engine["command"] == ["vllm", "serve", "openai/gpt-oss-120b", "--config",
                                 "/config/config.yaml", "--host", "0.0.0.0", "--port", "8000"]
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == 2  # each replica its TP2
    assert members["spec"]["clusterIP"] == "None"  # each pod its own name
    set_name = replicas["metadata"]["name"]
    assert replicas["spec"]["serviceName"] == members["metadata"]["name"] == set_name
    (container,) = router["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/vllm-router:0.1.17"
    urls = [f"http://{set_name}-{i}.{set_name}:8000" for i in range(2)]
    assert container["command"][:4] == ["vllm-router", "--worker-urls", *urls]
    assert container["command"][4:6] == ["--policy", "cache_aware"]
    # Clients call the router's Service, which selects the router's pod, not the replicas'.
    assert front["spec"]["selector"] == router["spec"]["selector"]["matchLabels"]
    record = json.loads((tmp_path / "best.json").read_text())
    assert record["launch"]["router"]["replicas"] == 2


def test_the_k8s_export_of_replicas_needs_the_routers_image(gpu_store, tmp_path):
    from tuner.spec.errors import BadInput

    trial = add_gpu_trial(gpu_store, {"tensor_parallel_size": 1, "replicas": 2}, gpus=2)
    with pytest.raises(BadInput, match="--format k8s of trial 0 needs --router-image"):
        write_export(gpu_store.get_study("g"), trial, tmp_path / "out", ("k8s",))
    assert not (tmp_path / "out").exists()
