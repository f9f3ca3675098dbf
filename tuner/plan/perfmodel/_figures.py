"""Published figures (tuner/data/published.csv) as observations the model can predict, or the
reason it cannot; which figures calibrate the model and which are held out."""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

from tuner.plan.perfmodel._facts import facts, gpu_for_model, model_facts
from tuner.plan.perfmodel._layout import parse_parallelism
from tuner.plan.perfmodel._roofline import MAX, Setup, default_backend
from tuner.spec.errors import BadInput
from tuner.spec.model_shape import known_shapes

DEFAULT_LENGTH = 1024  # ISL/OSL assumed for a published figure that does not give them
CALIBRATION_LENGTHS = ("1024", "1024")  # only figures published at these lengths calibrate

METRICS = {
    "output_tok_s_per_gpu": "output tokens per second per GPU",
    "total_tok_s_per_gpu": "input + output tokens per second per GPU",
    "output_tok_s_per_user": "decode tokens per second one user sees",
    "tpot_ms": "time per output token",
    "itl_ms": "inter-token latency",
    "ttft_ms": "median time to first token",
    "ttft_p90_ms": "90th percentile time to first token",
    "ttft_p99_ms": "99th percentile time to first token",
    "ttft_ms_p99": "99th percentile time to first token (InferenceX's name)",
}
# What `tuner plan` predicts, and the published metrics that measure each (p99 TTFT apart: it
# is mostly waiting, and its band is its own).
GROUPS = {
    "tok_s_per_gpu": ("output_tok_s_per_gpu", "total_tok_s_per_gpu"),
    "tok_s_per_user": ("output_tok_s_per_user", "tpot_ms", "itl_ms"),
    "ttft": ("ttft_ms", "ttft_p90_ms"),
    "ttft_p99": ("ttft_p99_ms", "ttft_ms_p99"),
}
GROUP_OF = {m: g for g, ms in GROUPS.items() for m in ms}


@dataclass(frozen=True)
class Figure:
    """One row of a published-figures CSV (the columns of tuner/data/published.csv)."""

    model: str
    engine: str
    gpu: str
    gpus: str
    parallelism: str
    isl: str
    osl: str
    concurrency: str
    speculative: str
    metric: str
    value: str
    source: str
    # Optional columns. length_range "a..b": each request's lengths uniform in [a L, b L]
    # (InferenceX's and SGLang's --random-range-ratio r is "r..1", vLLM's and tuner's
    # "1-r..1+r"); empty: exact lengths. serving: empty for one aggregated server per
    # `parallelism`, else a mode of `unmodelled` in tuner/data/perfmodel.yaml.
    length_range: str = ""
    serving: str = ""


REQUIRED = [f.name for f in fields(Figure) if f.default is MISSING]


def read_figures(path: Path) -> list[Figure]:
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        names = [f.name for f in fields(Figure)]
        missing = [n for n in REQUIRED if n not in (reader.fieldnames or [])]
        if missing:
            raise BadInput(f"{path}: missing columns {', '.join(missing)} (expected "
                           f"{','.join(names)})")
        return [Figure(**{n: (row.get(n) or "").strip() for n in names}) for row in reader]


@dataclass(frozen=True)
class Observation:
    """A figure the model can predict: its setup, concurrency, metric and value."""

    setup: Setup
    concurrency: float
    metric: str
    value: float
    notes: tuple[str, ...] = ()


def length_range(text: str) -> tuple[float, float]:
    """(mean factor, relative half-width) of a length range "a..b" (empty: exact)."""
    if not text:
        return 1.0, 0.0
    m = re.fullmatch(r"\s*([0-9.]+)\s*\.\.\s*([0-9.]+)\s*", text)
    if not m or not 0 <= float(m.group(1)) <= float(m.group(2)) or float(m.group(2)) == 0:
        raise ValueError(f"length_range {text!r} is not 'a..b' with 0 <= a <= b, b > 0")
    lo, hi = float(m.group(1)), float(m.group(2))
    mean = (lo + hi) / 2
    return mean, (hi - lo) / 2 / mean


def observation(fig: Figure) -> Observation:
    """The figure as an Observation; ValueError(reason) when the model cannot predict it."""
    f = facts()
    if fig.serving:
        if fig.serving not in f.unmodelled:
            raise ValueError(f"serving {fig.serving!r} is not a mode the model knows "
                             f"({', '.join(f.unmodelled)} are listed as not modelled)")
        raise ValueError(f.unmodelled[fig.serving])
    if fig.metric not in METRICS:
        raise ValueError(f"metric {fig.metric!r} is not one the model predicts "
                         f"({', '.join(METRICS)})")
    try:
        value = float(fig.value)
    except ValueError:
        raise ValueError(f"value {fig.value!r} is not a number") from None
    if fig.model not in known_shapes():
        raise ValueError(f"model {fig.model!r} has no shape in tuner/data/models.yaml")
    if fig.engine not in f.engines:
        raise ValueError(f"engine {fig.engine!r} has no facts in tuner/data/perfmodel.yaml")
    try:
        gpu = gpu_for_model(fig.gpu)
    except BadInput as e:
        raise ValueError(str(e)) from None
    engine = f.engine(fig.engine)
    if gpu.arch not in engine.moe_backend_default:
        raise ValueError(f"{fig.engine} has no default MoE backend for {gpu.arch} in "
                         "tuner/data/perfmodel.yaml")
    layout = parse_parallelism(fig.parallelism)
    gpus = int(fig.gpus) if fig.gpus.isdigit() else layout.world
    if gpus % layout.world:
        raise ValueError(f"{gpus} GPUs are not a whole number of {fig.parallelism} servers")
    notes = []
    lengths = []
    harness = next((h for h in f.harnesses if h.matches(fig.source)), None)
    mean, spread = length_range(fig.length_range or (harness.length_range if harness else ""))
    for name, text in (("isl", fig.isl), ("osl", fig.osl)):
        if text.isdigit():
            lengths.append(int(text) * mean)
        else:
            lengths.append(DEFAULT_LENGTH)
            notes.append(f"{name} {DEFAULT_LENGTH} assumed")
    method = fig.speculative.lower() or "none"
    if method not in ("none", *f.drafts):
        raise ValueError(f"speculative method {fig.speculative!r} has no draft facts")
    k = 0 if method == "none" else f.default_draft_len
    if k:
        notes.append(f"draft length {k} assumed")
    if fig.concurrency.lower() == "max":
        conc = MAX
    elif fig.concurrency.isdigit() and int(fig.concurrency) > 0:
        conc = float(fig.concurrency)
    else:
        raise ValueError(f"concurrency {fig.concurrency!r} is neither a number nor 'max'")
    setup = Setup(model=model_facts(fig.model), gpu=gpu, engine=engine, layout=layout,
                  moe_backend=default_backend(engine, gpu), max_batch_size=engine.max_batch_size,
                  max_num_tokens=(harness.max_num_tokens.get(engine.name, engine.max_num_tokens)
                                  if harness else engine.max_num_tokens), kv_cache_dtype="auto",
                  memory_fraction=0.9, speculative=method, draft_len=k, isl=lengths[0],
                  osl=lengths[1], replicas=gpus // layout.world, spread=spread,
                  prompts_per_client=harness.prompts_per_client if harness else None)
    return Observation(setup, conc, fig.metric, value, tuple(notes))


def calibrates(fig: Figure) -> bool:
    """Whether the figure is one the shipped factors are fitted to (published at 1024/1024)."""
    return (fig.isl, fig.osl) == CALIBRATION_LENGTHS


def usable(figures: Sequence[Figure]) -> tuple[list[Observation], list[tuple[Figure, str]]]:
    """The figures the model can predict, and the others with the reason."""
    obs: list[Observation] = []
    skipped: list[tuple[Figure, str]] = []
    for fig in figures:
        try:
            obs.append(observation(fig))
        except ValueError as e:
            skipped.append((fig, str(e)))
    return obs, skipped


def split(figures: Sequence[Figure]) -> tuple[list[Figure], list[Figure]]:
    """(calibration figures, held-out figures)."""
    return [f for f in figures if calibrates(f)], [f for f in figures if not calibrates(f)]
