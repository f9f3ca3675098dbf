"""`tuner model ...`: generating models to tune on (`tuner model tiny`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.app import app, out

model_app = typer.Typer(no_args_is_help=True, help="Generate models to tune on.")
app.add_typer(model_app, name="model")


@model_app.command("tiny")
def model_tiny(out_dir: Annotated[Path, typer.Option("--out", help="Directory to write.")],
               seed: int = 0) -> None:
    """A tiny gpt-oss (MoE) model with random weights and a local tokenizer; no hub access."""
    from tuner.serve.tiny_model import generate_tiny_gpt_oss

    path = generate_tiny_gpt_oss(out_dir, seed=seed)
    out.print(f"tiny gpt-oss model written to {path}")
