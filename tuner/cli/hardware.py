"""`tuner gpus`: this node's NVIDIA GPUs, as NVML reports them."""

from __future__ import annotations

from typing import Annotated

import typer

from tuner.cli.app import app, out


@app.command()
def gpus(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable.")] = False,
) -> None:
    """This node's NVIDIA GPUs (NVML): model, count, memory, driver and NVLink; exits 4
    where NVML is not available."""
    import json

    from tuner.serve.nvml import describe, read_gpus

    inv = read_gpus()
    if as_json:
        out.print(json.dumps(inv.to_dict(), indent=2))
        return
    for line in describe(inv):
        out.print(line)
