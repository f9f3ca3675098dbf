"""What the served model is, as feasibility and the performance model need it: its heads,
experts, layers and vocabulary, read from its config.json or named from tuner/data/models.yaml."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from tuner import DATA_DIR
from tuner.spec.errors import BadInput


@dataclass(frozen=True)
class ModelShape:
    """What feasibility (and the performance model) needs to know about the served model."""

    num_attention_heads: int
    num_key_value_heads: int
    num_experts: int  # 0 for a dense model
    vocab_size: int
    max_position_embeddings: int | None = None
    num_hidden_layers: int | None = None
    hidden_size: int | None = None
    head_dim: int | None = None
    experts_per_token: int | None = None

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0


def known_shapes() -> dict[str, dict]:
    return yaml.safe_load((DATA_DIR / "models.yaml").read_text())


def shape_by_name(name: str) -> ModelShape:
    shapes = known_shapes()
    if name not in shapes:
        raise BadInput(f"model shape {name!r} is not in tuner/data/models.yaml: use one of "
                       f"{', '.join(shapes)}")
    s = shapes[name]
    return ModelShape(
        num_attention_heads=s["num_attention_heads"], num_key_value_heads=s["num_key_value_heads"],
        num_experts=s["num_experts"], vocab_size=s["vocab_size"],
        max_position_embeddings=s["max_position_embeddings"],
        num_hidden_layers=s["num_hidden_layers"], hidden_size=s["hidden_size"],
        head_dim=s["head_dim"], experts_per_token=s["experts_per_token"],
    )


def read_model_shape(model_dir: Path) -> ModelShape:
    cfg_path = Path(model_dir) / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError) as e:
        raise BadInput(
            f"model.path {model_dir}: no readable config.json ({e.__class__.__name__}): "
            "point model.path at a Hugging Face model directory, or name a known shape in "
            "model.shape"
        ) from e
    heads = cfg.get("num_attention_heads")
    if not isinstance(heads, int):
        raise BadInput(f"model.path {model_dir}: config.json has no num_attention_heads")
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts")
    return ModelShape(
        num_attention_heads=heads,
        num_key_value_heads=int(cfg.get("num_key_value_heads", heads)),
        num_experts=int(experts or 0),
        vocab_size=int(cfg["vocab_size"]),
        max_position_embeddings=cfg.get("max_position_embeddings"),
        num_hidden_layers=cfg.get("num_hidden_layers"),
        hidden_size=cfg.get("hidden_size"),
        head_dim=cfg.get("head_dim"),
        experts_per_token=cfg.get("num_experts_per_tok"),
    )
