"""What an export checks before it writes anything: a configuration a deploy would trip on
(devices that do not match its parallel sizes, a draft length without a draft model, CUDA-graph
sizes out of order or above the batch) is refused with every problem named."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tuner.serve.routers import world_size
from tuner.spec.errors import BadInput

if TYPE_CHECKING:  # the record is built in export.py, which calls this
    from tuner.report.export import ExportRecord


def check_invariants(record: ExportRecord, adapter) -> None:
    """An export a deploy would trip on is refused before any file is written."""
    params, config = record.parameters, record.launch.config
    problems = []
    world, devices = world_size(adapter, params), record.hardware.gpus
    if record.hardware.gpu_type == "cpu":  # a CPU rank is bound to a fixed number of cores
        if devices % world:
            problems.append(f"the parallel sizes need a multiple of {world} cores, the record "
                            f"says {devices}")
    elif world != devices:
        problems.append(f"the parallel sizes need {world} GPUs, the record says {devices}")
    if params.get("speculative_method") == "eagle3" and not _draft_model(config):
        problems.append("a draft length without a draft model")
    batch = params.get("max_batch_size")
    for where, sizes in _cuda_graph_sizes(config):
        if sizes != sorted(set(sizes)):
            problems.append(f"{where} must be sorted and unique, got {sizes}")
        # vLLM's sizes count tokens (batch x (1 + draft) when speculating), not requests.
        if batch is not None and where not in TOKEN_COUNTED and any(s > batch for s in sizes):
            problems.append(f"{where} {sizes} goes above the max batch size {batch}")
    if problems:
        raise BadInput(f"export of trial {record.trial} refused: " + "; ".join(problems))


def _draft_model(config: dict[str, Any]) -> str | None:
    for key in ("speculative-config", "speculative_config"):
        spec = config.get(key) or {}
        for name in ("model", "speculative_model", "speculative_model_dir"):
            if spec.get(name):
                return spec[name]
    return config.get("speculative-draft-model-path")


# vLLM's capture sizes count tokens: its recipe's 2048 above a batch of 512 is right.
TOKEN_COUNTED = ("cudagraph-capture-sizes", "max-cudagraph-capture-size")


def _cuda_graph_sizes(config: dict[str, Any]) -> list[tuple[str, list[int]]]:
    """Every CUDA-graph batch-size list or cap in an engine config, as lists."""
    found = []
    for key in ("cudagraph-capture-sizes", "cuda-graph-bs"):
        if isinstance(config.get(key), list):
            found.append((key, config[key]))
    for key in ("max-cudagraph-capture-size",):
        if isinstance(config.get(key), int):
            found.append((key, [config[key]]))
    graphs = config.get("cuda_graph_config") or {}
    if isinstance(graphs.get("batch_sizes"), list):
        found.append(("cuda_graph_config.batch_sizes", graphs["batch_sizes"]))
    if isinstance(graphs.get("max_batch_size"), int):
        found.append(("cuda_graph_config.max_batch_size", [graphs["max_batch_size"]]))
    return found
