"""A study in its own units: figures per GPU on a GPU node, per core on a CPU node.

Figures are computed per device everywhere (output tok/s over the devices a trial's ranks run
on), and the code and the store name them per GPU. What a reader sees is said in the study's
unit, at the boundary where text and tables leave tuner: the terminal and the dashboard's
per-study pages. A CPU study priced per core-hour is never labelled tok/s/GPU.
"""

from __future__ import annotations

import re

import pandas as pd

from tuner.verdict.cost import device_unit

_PER_GPU = re.compile(r"\b(tok/s/|tok/s per |output tok/s per |per )GPU\b")
_GPUS = re.compile(r"^(GPUs|gpus)$")


def in_units(text: str, gpu_type: str) -> str:
    """`text` with its per-GPU figures said per the study's device (`per core` on CPU)."""
    unit = device_unit(gpu_type)
    if unit == "GPU":
        return text
    return _PER_GPU.sub(lambda m: m.group(1) + unit, text)


def frame_in_units(frame: pd.DataFrame, gpu_type: str) -> pd.DataFrame:
    """A table whose per-GPU columns (and its device count) are named in the study's unit."""
    unit = device_unit(gpu_type)
    if unit == "GPU":
        return frame
    return frame.rename(columns=lambda c: f"{unit}s" if _GPUS.match(str(c))
                        else in_units(str(c), gpu_type))
