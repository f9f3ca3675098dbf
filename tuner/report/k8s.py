"""A Kubernetes Deployment + Service (+ the config file as a ConfigMap) for an exported trial;
for a trial of replicas, a StatefulSet of them, the router as a Deployment and a Service in
front of it.

The container runs the engine's own command (no container runtime inside the image) with the
config mounted at /config, where that command reads it, and the spec's environment. The model
comes from a PersistentVolumeClaim (`tuner-model-cache`): a hub name is cached there at the
Hugging Face cache path, a local checkpoint path is mounted from it read-only, so a restart or
a second deploy does not download the checkpoint again. GPUs come from the NVIDIA device plugin
(`nvidia.com/gpu` limits, at most one node's worth: a GB200 compute tray is 4) on nodes that GPU
feature discovery labels with the product (`nvidia.com/gpu.product`), and the readiness probe
asks the engine's own health endpoint.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from tuner.serve.engines.rules import gpus_per_node

# GPU feature discovery's nvidia.com/gpu.product label values for tuner's GPU types.
GPU_PRODUCT_LABEL = {
    "H100-SXM": "NVIDIA-H100-80GB-HBM3",
    "H200": "NVIDIA-H200",
    "B200": "NVIDIA-B200",
    "GB200": "NVIDIA-GB200",
}
DEFAULT_IMAGES = {
    "vllm": "vllm/vllm-openai:v{version}",
    "sglang": "lmsysorg/sglang:v{version}",
}
PORT = 8000
CONFIG_DIR = "/config"
MODEL_CACHE_CLAIM = "tuner-model-cache"
HF_CACHE = "/root/.cache/huggingface"  # HF_HOME inside the engine images (they run as root)


def model_cache(model: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """(volume, mount, env) of the model cache for a hub name or a local checkpoint path."""
    volume = {"name": "model-cache", "persistentVolumeClaim": {"claimName": MODEL_CACHE_CLAIM}}
    if model.startswith("/"):
        return volume, {"name": "model-cache", "mountPath": model, "readOnly": True}, {}
    return volume, {"name": "model-cache", "mountPath": HF_CACHE}, {"HF_HOME": HF_CACHE}


def _name(text: str) -> str:
    """A DNS-1123 label from free text."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:50] or "tuner"


def image_for(engine: str, version: str | None, container: dict | None) -> str:
    if container and container.get("image"):
        return container["image"]
    template = DEFAULT_IMAGES.get(engine)
    if template is None or not version:
        raise ValueError(f"no container image known for {engine} {version or ''}: set "
                         "engine.container.image in the spec")
    return template.format(version=version.split("+")[0])


def _labels(name: str, study: str, trial: int) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "tuner",
            "tuner/study": _name(study), "tuner/trial": str(trial)}


def _engine_pod(*, engine: str, gpu_type: str, gpus: int, command: list[str],
                env: dict[str, str], image: str, health_path: str, model: str,
                config_map: str) -> dict[str, Any]:
    """The pod spec of one engine server: its own command, the config file mounted, the model
    from the cache claim, its GPUs from the device plugin."""
    on_gpu = gpu_type in GPU_PRODUCT_LABEL
    # The device plugin chooses the GPUs: a CUDA_VISIBLE_DEVICES from the trial would be wrong.
    env = {k: v for k, v in env.items() if k != "CUDA_VISIBLE_DEVICES"}
    cache_volume, cache_mount, cache_env = model_cache(model)
    env = {**cache_env, **env}
    container: dict[str, Any] = {
        "name": engine,
        "image": image,
        "command": command,
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "ports": [{"name": "http", "containerPort": PORT}],
        "readinessProbe": {"httpGet": {"path": health_path, "port": "http"},
                           "initialDelaySeconds": 30, "periodSeconds": 10,
                           "failureThreshold": 120},
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR},
                         {"name": "shm", "mountPath": "/dev/shm"}, cache_mount],
    }
    if on_gpu:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    pod: dict[str, Any] = {
        "containers": [container],
        "volumes": [{"name": "config", "configMap": {"name": config_map}},
                    {"name": "shm", "emptyDir": {"medium": "Memory"}}, cache_volume],
    }
    if on_gpu:
        pod["nodeSelector"] = {"nvidia.com/gpu.product": GPU_PRODUCT_LABEL[gpu_type]}
    return pod


def _service(name: str, labels: dict[str, str], *, headless: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": {"app.kubernetes.io/name": name},
                            "ports": [{"name": "http", "port": PORT, "targetPort": "http"}]}
    if headless:  # each pod its own DNS name: <pod>.<service>
        spec["clusterIP"] = "None"
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels},
            "spec": spec}


def manifests(*, study: str, trial: int, engine: str, gpu_type: str, gpus: int,
              command: list[str], env: dict[str, str], files: dict[str, str], image: str,
              health_path: str, model: str) -> list[dict[str, Any]]:
    name = _name(f"{study}-t{trial}")
    labels = _labels(name, study, trial)
    pod = _engine_pod(engine=engine, gpu_type=gpu_type, gpus=gpus, command=command, env=env,
                      image=image, health_path=health_path, model=model, config_map=name)
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels},
         "data": dict(files)},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": name, "labels": labels},
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
                  "template": {"metadata": {"labels": labels}, "spec": pod}}},
        _service(name, labels),
    ]


def replica_names(study: str, trial: int, replicas: int) -> list[str]:
    """The replicas' addresses inside the cluster: the StatefulSet's pods under its headless
    Service (`<set>-<i>.<set>`, resolved in the namespace they run in)."""
    name = _name(f"{study}-t{trial}") + "-replica"
    return [f"http://{name}-{i}.{name}:{PORT}" for i in range(replicas)]


def replica_manifests(*, study: str, trial: int, engine: str, gpu_type: str, gpus: int,
                      replicas: int, command: list[str], env: dict[str, str],
                      files: dict[str, str], image: str, health_path: str, model: str,
                      router: str, router_command: list[str], router_image: str,
                      ) -> list[dict[str, Any]]:
    """Replicas behind a router: a StatefulSet of `replicas` engine pods (`gpus` each) under a
    headless Service (each pod its own DNS name, the router's worker URLs: `replica_names`),
    the router as a Deployment running `router_command`, and a Service in front of the router,
    which is what clients call."""
    name = _name(f"{study}-t{trial}")
    labels = _labels(name, study, trial)
    members = f"{name}-replica"
    member_labels = _labels(members, study, trial)
    pod = _engine_pod(engine=engine, gpu_type=gpu_type, gpus=gpus, command=command, env=env,
                      image=image, health_path=health_path, model=model, config_map=name)
    router_pod = {"containers": [{
        "name": _name(router), "image": router_image, "command": router_command,
        "ports": [{"name": "http", "containerPort": PORT}],
        # Healthy once every replica is (it waits for them before it serves).
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"},
                           "initialDelaySeconds": 10, "periodSeconds": 10,
                           "failureThreshold": 360},
    }]}
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels},
         "data": dict(files)},
        {"apiVersion": "apps/v1", "kind": "StatefulSet",
         "metadata": {"name": members, "labels": member_labels},
         "spec": {"replicas": replicas, "serviceName": members,
                  # All at once, as the trial started them: none waits for another to be ready.
                  "podManagementPolicy": "Parallel",
                  "selector": {"matchLabels": {"app.kubernetes.io/name": members}},
                  "template": {"metadata": {"labels": member_labels}, "spec": pod}}},
        _service(members, member_labels, headless=True),
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": name, "labels": labels},
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
                  "template": {"metadata": {"labels": labels}, "spec": router_pod}}},
        _service(name, labels),
    ]


def dump(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


STORAGE_SECRET = "tuner-storage"  # the Secret holding the storage URL, under key `url`
STORAGE_KEY = "url"


def workers_job(*, study: str, workers: int, image: str, gpu_type: str, devices: int | None,
                secret: str = STORAGE_SECRET, model: str | None = None) -> dict[str, Any]:
    """A Job of `workers` pods, each running `tuner worker` against the shared study.

    The storage URL (with its password) comes from a Secret through the environment, never
    from the manifest. Each pod exits 0 once the study's budget is spent, so the Job completes
    when every worker has; a pod that dies is restarted in place (OnFailure), and the new worker
    reaps its predecessor's leftovers while the others retry its trial.
    """
    name = _name(f"{study}-workers")
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "tuner",
              "tuner/study": _name(study)}
    container: dict[str, Any] = {
        "name": "worker",
        "image": image,
        "command": ["tuner", "worker", "--study", study],
        "env": [{"name": "TUNER_STORAGE",
                 "valueFrom": {"secretKeyRef": {"name": secret, "key": STORAGE_KEY}}}],
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
    }
    pod: dict[str, Any] = {
        "restartPolicy": "OnFailure",
        "containers": [container],
        "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
    }
    if model:  # every trial's server reads the checkpoint from the shared cache
        volume, mount, env = model_cache(model)
        container["volumeMounts"].append(mount)
        container["env"] += [{"name": k, "value": v} for k, v in env.items()]
        pod["volumes"].append(volume)
    if gpu_type in GPU_PRODUCT_LABEL:
        # The device plugin gives each pod GPUs of its own: a worker claims only those.
        node = gpus_per_node(gpu_type) or 8  # a GB200 compute tray: 4
        container["resources"] = {"limits": {"nvidia.com/gpu": min(devices or node, node)}}
        pod["nodeSelector"] = {"nvidia.com/gpu.product": GPU_PRODUCT_LABEL[gpu_type]}
    elif devices:
        container["resources"] = {"requests": {"cpu": str(devices)},
                                  "limits": {"cpu": str(devices)}}
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": labels},
        "spec": {"parallelism": workers, "completions": workers, "backoffLimit": 2 * workers,
                 "template": {"metadata": {"labels": labels}, "spec": pod}},
    }


def secret_howto(secret: str = STORAGE_SECRET) -> str:
    """How to create the Secret the Job reads, as YAML comments: the URL is never written here."""
    return (
        f"# The workers read the study database's URL from Secret {secret!r} (key "
        f"{STORAGE_KEY!r}).\n"
        "# Create it once, without writing the password to a file:\n"
        f"#   kubectl create secret generic {secret} --from-literal={STORAGE_KEY}="
        "\"postgresql://USER:PASSWORD@HOST:5432/DB\"\n"
        "# The study must exist first: tuner run STUDY.yaml --create-only --storage URL\n"
    )
