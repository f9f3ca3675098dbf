"""What a measured level costs, each rule written once: the price of a study's device-hour, the
price of a server's devices, and USD per million output tokens.

A level's figures are per device (`output_tok_s_per_gpu` is its output tok/s divided by the
devices its server ran on, `Inventory.devices_for`: TP x DP GPUs, or on a CPU node the cores its
ranks are bound to), and the trial stores that count as `gpus`. So a server-hour costs the price
of a device-hour times those devices, and a million output tokens cost a server-hour over the
millions of tokens the server put out in that hour. The CLI's tables, `best.json`, `tuner choose`
and the dashboard all ask these functions.
"""

from __future__ import annotations

from typing import Any

from tuner.spec.gpu_prices import DevicePrice, device_price
from tuner.store import StudyRecord, TrialRecord
from tuner.store.records import LevelMeasurement

__all__ = ["SECONDS_PER_HOUR", "level_usd_per_mtok", "server_hour_usd", "study_price",
           "trial_server_hour_usd", "usd_per_mtok"]

SECONDS_PER_HOUR = 3600.0


def study_price(study: StudyRecord) -> DevicePrice | None:
    """A device-hour of the study's GPU type (per core on `cpu`): its spec's
    `hardware.gpu_hour_usd`, else the example table's; None when neither prices it."""
    hardware = (study.spec or {}).get("hardware") or {}
    return device_price(study.gpu_type, hardware.get("gpu_hour_usd"))


def device_unit(gpu_type: str) -> str:
    """What a device-hour is an hour of: a CPU core on `cpu`, else a GPU."""
    return "core" if gpu_type.lower() == "cpu" else "GPU"


def no_price_text(gpu_type: str) -> str:
    """Why a study has no costs, and the fix."""
    return (f"no price for GPU type {gpu_type}: set hardware.gpu_hour_usd in the spec for USD "
            "per million tokens")


def server_hour_usd(device_hour_usd: Any, devices: Any) -> Any:
    """The price of one hour of a server's devices: a device-hour times the devices it runs on
    (the count its per-device figures are divided by). Numbers or pandas columns alike."""
    return device_hour_usd * devices


def usd_per_mtok(server_hour: Any, output_tok_s: Any) -> Any:
    """USD per million output tokens: a server-hour's price over the millions of output tokens
    it serves in that hour, `server_hour / (output_tok_s x 3600) x 1e6`.

    Takes numbers (None when there is no price or no throughput) or pandas columns (NaN there),
    so the dashboard computes whole frames with the same function."""
    if isinstance(output_tok_s, int | float) or output_tok_s is None:
        if server_hour is None or output_tok_s is None or not output_tok_s > 0:
            return None
        return server_hour / (output_tok_s * SECONDS_PER_HOUR) * 1e6
    tok_s = output_tok_s.where(output_tok_s > 0)
    return server_hour / (tok_s * SECONDS_PER_HOUR) * 1e6


def trial_server_hour_usd(study: StudyRecord, trial: TrialRecord) -> float | None:
    """One hour of the trial's server at the study's price; None without a price or devices."""
    price = study_price(study)
    if price is None or not trial.gpus:
        return None
    return server_hour_usd(price.usd_per_hour, trial.gpus)


def level_usd_per_mtok(study: StudyRecord, trial: TrialRecord,
                       level: LevelMeasurement) -> float | None:
    """USD per million output tokens at one of the trial's levels (its first run's or its
    confirmation's: the same server size)."""
    return usd_per_mtok(trial_server_hour_usd(study, trial), level.output_tok_s)
