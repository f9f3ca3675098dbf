"""A study in its own units: figures per GPU on a GPU node, per core on a CPU node.

Figures are computed per device everywhere (output tok/s over the devices a trial's ranks run
on), and the code and the store name them per GPU. What a reader sees is said in the study's
unit, at the boundary where text and tables leave tuner: the terminal and the dashboard's pages.
A CPU study priced per core-hour is never labelled tok/s/GPU; a page that sets studies of
GPU and CPU nodes side by side says per device.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import pandas as pd

from tuner.verdict.cost import device_unit

__all__ = ["UNITS", "column_in_unit", "device_unit", "frame_in_unit", "frame_in_units",
           "in_units", "say", "shared_unit"]

UNITS = ("GPU", "core", "device")
_PER_GPU = re.compile(r"\b(tok/s/|tok/s per |output tok/s per |per )GPU\b")
_GPU_TYPE = re.compile(r"\b(GPU|gpu) type\b|\bGPU(?= · engine)")
_GPUS = re.compile(r"^(GPUs|gpus)$")


def say(text: str, unit: str) -> str:
    """`text` with its per-GPU figures said per `unit` (one of UNITS), and its GPU type as the
    hardware it names."""
    if unit == "GPU":
        return text
    return _GPU_TYPE.sub("hardware", _PER_GPU.sub(lambda m: m.group(1) + unit, text))


def in_units(text: str, gpu_type: str) -> str:
    """`text` with its per-GPU figures said per the study's device (`per core` on CPU)."""
    return say(text, device_unit(gpu_type))


def shared_unit(gpu_types: Iterable[str]) -> str:
    """The unit of a page that draws several studies: theirs when they share it, else
    `device` (a GPU beside a core)."""
    units = {device_unit(g) for g in gpu_types}
    return units.pop() if len(units) == 1 else "device"


def column_in_unit(name: str, unit: str) -> str:
    """A column's name in `unit`: `tok/s/core`, and the device count `cores`."""
    if unit != "GPU" and _GPUS.match(name):
        return f"{unit}s"
    return say(name, unit)


def frame_in_unit(frame: pd.DataFrame, unit: str) -> pd.DataFrame:
    """A table whose per-GPU columns (and its device count) are named in `unit`."""
    if unit == "GPU":
        return frame
    return frame.rename(columns=lambda c: column_in_unit(str(c), unit))


def frame_in_units(frame: pd.DataFrame, gpu_type: str) -> pd.DataFrame:
    """A table whose per-GPU columns (and its device count) are named in the study's unit."""
    return frame_in_unit(frame, device_unit(gpu_type))
