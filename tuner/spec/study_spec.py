"""The study spec: what to tune, on what, under which workload, objective, SLA and budget.

A spec is a YAML file that names a search space and adds everything else. Unknown fields are
errors (a typo must not silently fall back to a default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tuner.spec.names import name_problem
from tuner.spec.quality_spec import QualitySpec
from tuner.spec.sla import SLA
from tuner.spec.yamlio import load_model, read_yaml

DEFAULT_STORAGE = "sqlite:///tuner.db"

# Engine options are what an engine's config file or command line takes: scalars, and lists or
# mappings of them where an engine nests (TensorRT-LLM's kv_cache_config, cuda_graph_config),
# never arbitrary YAML objects.
Scalar = bool | int | float | str | None
Nested = Scalar | list[Scalar] | dict[str, Scalar | list[Scalar]]
EngineArg = Scalar | list[Scalar] | dict[str, Nested]

# Upper bounds on the load, so a typo cannot ask for what no load generator or node holds: a
# level of more requests in flight than one client has ports for, more requests per second than
# the load generator can send, a sweep of more prompts than fit in memory.
MAX_CONCURRENCY = 60_000
MAX_REQUEST_RATE = 100_000.0
MAX_TOKENS_PER_REQUEST = 1_048_576
MAX_SWEEP_PROMPTS = 1_000_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSpec(_Strict):
    path: str = Field(description="Local model directory (or a name the engine resolves itself).")
    generate: Literal["tiny-gpt-oss", "tiny-qwen3-moe"] | None = Field(
        None, description="Generate this model at `path` when it is missing (random weights); "
        "tiny-qwen3-moe serves the chat API on CPU (vLLM renders gpt-oss chat in Harmony)."
    )
    seed: int = Field(0, description="Seed of the generated model.")
    shape: str | None = Field(
        None, description="A model shape in tuner/data/models.yaml (e.g. gpt-oss-120b), used "
        "when the checkpoint is not on this machine (dry runs, plans)."
    )


class ContainerSpec(_Strict):
    """Run the engine inside a container (how most users get TensorRT-LLM)."""

    runtime: str = Field("docker", description="docker or podman.")
    image: str = Field(description="e.g. nvcr.io/nvidia/tensorrt-llm/release:<tag>")
    args: list[str] = Field(default_factory=list, description="Extra `run` arguments.")


class EngineSpec(_Strict):
    name: str = Field(description="Engine adapter: vllm.")
    executable: str | None = Field(
        None, description="The engine's command, on PATH or a path (default: vllm, trtllm-serve)."
    )
    args: dict[str, EngineArg] = Field(
        default_factory=dict,
        description="Fixed engine options for every trial, keyed as in the engine's config file "
        "(vLLM: long flag names, e.g. max-model-len).",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")
    ready_timeout_s: float = Field(300, gt=0, description="How long a server may take to be ready.")
    port: int | None = Field(None, ge=1, le=65535, description="Fixed port; default: a free one.")
    draft_model: str | None = Field(
        None, description="Draft model for EAGLE-3 speculative decoding (path or name)."
    )
    container: ContainerSpec | None = Field(None, description="Run the engine in a container.")


class HardwareSpec(_Strict):
    gpu_type: str = Field(description="The accelerator type the study is for; `cpu` on a CPU node.")
    devices: int | None = Field(
        None, gt=0, description="Devices a trial may use (GPUs, or CPU cores); default: all found."
    )
    cores_per_rank: int | None = Field(
        None, gt=0, description="CPU nodes: cores bound to each engine rank, the same for every "
        "trial, so figures are per core used; default: the cores divided by the largest world "
        "size (TP x DP) of the space that fits times budget.parallel_trials. Set it to compare "
        "studies run with different parallel_trials."
    )
    gpu_hour_usd: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="USD per device-hour, for the cost per "
        "million output tokens (`tuner choose`): per GPU-hour on a GPU type, per core-hour on "
        "cpu (a CPU node's device is a core). Default: the example figure "
        "tuner/data/gpu_prices.csv gives for gpu_type."
    )


class LoadSearchSpec(_Strict):
    """How `concurrency: auto` (or `request_rates: auto`) searches each trial's load: from
    `start`, doubling while a level meets the SLA, then bisecting between the highest load that
    met it and the lowest above it that missed, until they are within `resolution` of each
    other or the bound is reached (tuner.search.load_search)."""

    start: float = Field(
        1, gt=0, description="The first load: a concurrency, or requests/s for request_rates "
        "auto."
    )
    max: float | None = Field(
        None, gt=0, description="The highest load tried. Default for concurrency: the most "
        "requests the trial's configuration runs at once (max batch size x data-parallel "
        "ranks); for request rates: none (the search doubles until a rate misses the SLA)."
    )
    resolution: float = Field(
        0.25, gt=0, lt=1, description="Stop bisecting once the bracket is within this fraction "
        "of the load that met the SLA (and, for concurrency, within 1)."
    )

    @model_validator(mode="after")
    def _ordered(self) -> LoadSearchSpec:
        if self.max is not None and self.max < self.start:
            raise ValueError(f"load_search.max ({self.max:g}) is below load_search.start "
                             f"({self.start:g}): raise max or lower start")
        return self


class ConversationSpec(_Strict):
    """Multi-turn chats: prompts that share prefixes, as a chat service's traffic does."""

    turns: int = Field(
        ge=1, le=64, description="User turns per conversation. Turn k resends the conversation "
        "so far (its user messages of input_len tokens and a scripted reply of output_len "
        "tokens after each) plus a new user message; a conversation's turns are sent one "
        "after another, conversations side by side (one per request in flight)."
    )
    system_prompt_len: int = Field(
        0, ge=0, le=MAX_TOKENS_PER_REQUEST, description="Tokens of a system prompt that "
        "every conversation starts with (0: none)."
    )

    def longest_prompt(self, input_len: int, output_len: int) -> int:
        """The last turn's prompt: the system prompt, every user message, every reply but
        the last."""
        return self.system_prompt_len + self.turns * input_len + (self.turns - 1) * output_len


class WorkloadSpec(_Strict):
    prompt_source: Literal["synthetic", "corpus", "file"] = Field(
        "synthetic", description="synthetic: random token ids; corpus: natural text shipped with "
        "tuner, tokenized by the served model's tokenizer (speculative decoding needs it); file: "
        "your own JSONL (`prompt_file`)."
    )
    prompt_file: str | None = Field(
        None, description="JSONL of prompts for prompt_source file, one per line: "
        '{"prompt": "text"}, ShareGPT {"conversations": [...]} or OpenAI {"messages": [...]}; '
        "relative to the spec file."
    )
    api: Literal["completions", "chat"] = Field(
        "completions", description="completions: /v1/completions; chat: /v1/chat/completions "
        "with messages (the server applies the model's chat template)."
    )
    input_len: int = Field(
        gt=0, le=MAX_TOKENS_PER_REQUEST, description="Prompt length in tokens; for "
        "prompt_source file, the longest prompt kept (longer ones are skipped), counted with "
        "the model's tokenizer."
    )
    output_len: int = Field(
        gt=0, le=MAX_TOKENS_PER_REQUEST, description="Generated tokens per request; with "
        "output_len_from dataset, the cap on each reply's length."
    )
    range_ratio: float = Field(
        0, ge=0, lt=1, description="synthetic and corpus: each request's input and output "
        "lengths uniform in [len * (1 - r), len * (1 + r)] (mean len), as `vllm bench serve` "
        "--random-range-ratio; 0: exact lengths."
    )
    output_len_from: Literal["spec", "dataset"] = Field(
        "spec", description="dataset (prompt_source file only): each request generates as many "
        "tokens as the file's reply to it has, as `vllm bench serve` does for ShareGPT."
    )
    arrival: Literal["concurrency", "poisson"] = Field(
        "concurrency", description="concurrency: closed loop, a fixed number in flight per "
        "level; poisson: open loop at each of request_rates, exponential gaps from `seed`."
    )
    concurrency: list[int] | Literal["auto"] = Field(
        description="Concurrency levels of the sweep, or `auto`: each trial searches for the "
        "highest concurrency that meets the SLA (`load_search`). With arrival poisson, the "
        "largest caps the requests in flight at every rate (auto: max batch x ranks)."
    )
    request_rates: list[float] | Literal["auto"] | None = Field(
        None, description="Requests per second, one level each (arrival poisson only), or "
        "`auto`: each trial searches for the highest rate that meets the SLA (`load_search`)."
    )
    load_search: LoadSearchSpec | None = Field(
        None, description="Where an `auto` load search starts, its bound and resolution "
        "(default: start 1, bound max batch x ranks, resolution 0.25)."
    )
    requests_per_level: int = Field(gt=0, description="Timed requests at each level, per round.")
    warmup_requests: int = Field(4, ge=0, description="Untimed requests before each level.")
    max_rounds: int = Field(
        1, ge=1, description="Rounds of requests_per_level per level, at most: 1 measures once; "
        "more repeat (at least 2) until output tok/s is known within ci_target."
    )
    ci_target: float = Field(
        0.05, gt=0, lt=1, description="Stop repeating once the 95% confidence half-width of "
        "output tok/s is within this fraction of its mean."
    )
    request_timeout_s: float = Field(120, gt=0)
    seed: int = 0
    conversation: ConversationSpec | None = Field(
        None, description="Multi-turn conversations with an optional shared system prompt "
        "instead of one-shot prompts; the server's prefix caching is turned on for them."
    )

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, v: list[int] | str) -> list[int] | str:
        if v == "auto":
            return v
        if not v:
            raise ValueError("concurrency needs at least one level, or auto")
        if any(c <= 0 for c in v):
            raise ValueError("concurrency levels must be positive integers")
        if max(v) > MAX_CONCURRENCY:
            raise ValueError(f"concurrency {max(v):,} is more requests in flight than one load "
                             f"generator can hold (at most {MAX_CONCURRENCY:,}): lower it")
        if len(set(v)) != len(v):
            raise ValueError("concurrency levels must be distinct")
        return sorted(v)

    @field_validator("request_rates")
    @classmethod
    def _rates(cls, v: list[float] | str | None) -> list[float] | str | None:
        if v is None or v == "auto":
            return v
        if not v or any(r <= 0 for r in v):
            raise ValueError("request rates must be a non-empty list of positive requests/s")
        if max(v) > MAX_REQUEST_RATE:
            raise ValueError(f"request rate {max(v):,g}/s is more than the load generator can "
                             f"send (at most {MAX_REQUEST_RATE:,.0f}/s): lower it")
        if len(set(v)) != len(v):
            raise ValueError("request rates must be distinct")
        return sorted(v)

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadSpec:
        if self.prompt_source == "file" and not self.prompt_file:
            raise ValueError("prompt_source file needs prompt_file: the path of a JSONL file")
        if self.prompt_file and self.prompt_source != "file":
            raise ValueError("prompt_file is read only with prompt_source file: set it or "
                             "remove prompt_file")
        if self.output_len_from == "dataset" and self.prompt_source != "file":
            raise ValueError("output_len_from dataset needs prompt_source file (replies to "
                             "measure): use output_len_from spec")
        if self.range_ratio and self.prompt_source == "file":
            raise ValueError("range_ratio spreads synthetic and corpus lengths; a prompt file's "
                             "prompts have their own: remove range_ratio")
        if self.api == "chat" and self.prompt_source == "synthetic":
            raise ValueError("api chat sends text, and random token ids are not text: use "
                             "prompt_source corpus or file")
        if self.arrival == "poisson" and not self.request_rates:
            raise ValueError("arrival poisson needs request_rates: e.g. [2, 4, 8] requests/s")
        if self.arrival == "concurrency" and self.request_rates is not None:
            raise ValueError("request_rates apply to arrival poisson: set it or remove them")
        if self.arrival == "poisson" and self.concurrency == "auto" \
                and self.request_rates == "auto":
            raise ValueError("a load search searches one load: with request_rates auto, give "
                             "concurrency as the in-flight cap (e.g. [256]) or leave it auto "
                             "with fixed request_rates")
        if self.conversation is not None:
            if self.arrival != "concurrency":
                raise ValueError("conversation turns follow each other in a closed loop: use "
                                 "arrival concurrency")
            if self.prompt_source == "file" or self.range_ratio:
                raise ValueError("conversation builds its turns from prompt_source synthetic "
                                 "or corpus at exact lengths: remove prompt_file and "
                                 "range_ratio")
        if self.load_search is not None and not self.auto:
            raise ValueError("load_search applies to concurrency auto or request_rates auto: "
                             "set one of them or remove load_search")
        if not self.auto and self.prompts_needed() > MAX_SWEEP_PROMPTS:
            raise ValueError(f"the sweep sends {self.prompts_needed():,} requests (levels x "
                             "(warmup_requests + requests_per_level x max_rounds + concurrency)), "
                             f"more than {MAX_SWEEP_PROMPTS:,}: lower requests_per_level or "
                             "max_rounds")
        return self

    @property
    def auto(self) -> bool:
        """Whether each trial searches its load (`concurrency: auto` closed loop, or
        `request_rates: auto`) rather than sweeping a fixed list."""
        if self.arrival == "poisson":
            return self.request_rates == "auto"
        return self.concurrency == "auto"

    @property
    def search(self) -> LoadSearchSpec:
        """The load search's settings (defaults where not given)."""
        return self.load_search or LoadSearchSpec()

    @property
    def level_count(self) -> int:
        """Levels in a fixed sweep: one per request rate (poisson) or per concurrency. A load
        search (`auto`) has no fixed count (tuner.search.load_search.MAX_LEVELS bounds it)."""
        if self.auto:
            raise ValueError("a load search has no fixed level count")
        return len(self.request_rates) if self.arrival == "poisson" else len(self.concurrency)

    def plan_levels(self) -> list[int]:
        """The concurrency levels a performance-model plan predicts: the list, or for
        `concurrency: auto` the doubling ladder from load_search.start to its max (1,024 when
        unset: the model has no trial's batch limit to bound it)."""
        if self.concurrency != "auto":
            return list(self.concurrency)
        c, top, ladder = max(1, int(self.search.start)), int(self.search.max or 1024), []
        while c <= top:
            ladder.append(c)
            c *= 2
        return ladder

    def prompts_needed(self, levels: int | None = None, in_flight: int | None = None) -> int:
        """Prompts for the whole sweep, so none is sent twice (and served from a prefix cache):
        per level, its warm-up, its rounds and, closed loop, the requests still in flight when it
        ends (cancelled, but sent). A load search gives its own most levels and in flight."""
        levels = self.level_count if levels is None else levels
        if self.arrival != "concurrency":
            in_flight = 0
        elif in_flight is None:
            in_flight = max(self.concurrency)
        return levels * (self.warmup_requests + self.requests_per_level * self.max_rounds
                         + in_flight)


class SLASpec(_Strict):
    ttft_p90_ms: float | None = Field(None, gt=0, description="p90 time to first token, at most.")
    min_tok_s_per_user_p90: float | None = Field(
        None, gt=0, description="Per-user decode speed that 90% of requests reach, at least."
    )

    def to_sla(self) -> SLA:
        return SLA(self.ttft_p90_ms, self.min_tok_s_per_user_p90)


class ObjectiveSpec(_Strict):
    """What the study maximises. `single`: output tok/s per GPU at the SLA. `pareto`: two
    objectives, output tok/s per GPU and per-user tok/s (p90), under the same SLA: the study
    searches for their front, and `tuner best/export --min-tok-s-per-user X` pick from it.
    `objective: pareto` is short for `objective: {kind: pareto}`."""

    metric: Literal["output_tok_s_per_gpu"] = "output_tok_s_per_gpu"
    kind: Literal["single", "pareto"] = "single"

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        if v == "pareto":
            return {"kind": "pareto"}
        if isinstance(v, str):
            return {"metric": v}
        return v

    @property
    def pareto(self) -> bool:
        return self.kind == "pareto"


class SamplerSpec(_Strict):
    # grid: every configuration once (Optuna's GridSampler), the exhaustive baseline.
    name: Literal["tpe", "random", "grid"] = "tpe"
    seed: int | None = 0
    n_startup_trials: int = Field(3, ge=1, description="Random trials before TPE models the space.")


class BudgetSpec(_Strict):
    n_trials: int = Field(gt=0, description="Trials that launch a server, for the whole study.")
    timeout_min: float | None = Field(
        None, gt=0, description="The study's time: no trial starts that would not end, with "
        "the head-to-head of `confirm_top_k` after it, within this many minutes (planned from "
        "what this run's trials cost).")
    trial_timeout_s: float = Field(600, gt=0, description="Ready wait plus the whole sweep.")
    parallel_trials: int = Field(
        1, ge=1, description="Trials run at the same time, each on its own devices (e.g. two "
        "TP4 trials on an 8-GPU node)."
    )
    confirm_top_k: int = Field(
        3, ge=0, description="At the end of `tuner run`, measure this many of the best trials "
        "again before naming a winner: head to head, their servers up together, where they fit "
        "(0: do not confirm)."
    )
    learn_from_failures: bool = Field(
        True, description="After a trial fails as unsupported or crash, skip the "
        "configurations that share the values its cause follows from (false: launch them)."
    )
    # Several workers on one study (`tuner worker`): a worker that stops beating for the grace
    # period is presumed dead, its trial failed and retried once by whichever worker notices.
    heartbeat_interval_s: int = Field(
        30, ge=1, description="How often a running trial's worker records that it is alive."
    )
    heartbeat_grace_s: int = Field(
        120, ge=1, description="Silence after which another worker fails the trial and retries "
        "it; several intervals, so a busy worker is not taken for dead."
    )

    @model_validator(mode="after")
    def _grace_outlasts_beats(self) -> BudgetSpec:
        if self.heartbeat_grace_s <= self.heartbeat_interval_s:
            raise ValueError("heartbeat_grace_s must be longer than heartbeat_interval_s")
        return self


class StudySpec(_Strict):
    name: str = Field(min_length=1, description="Study name: re-running the same name resumes "
                      "it. Letters, digits, '.', '_' and '-', at most 100 (a name, not a path).")
    search_space: str = Field(description="A name in search_spaces/ or a path to a space YAML.")
    model: ModelSpec
    engine: EngineSpec
    hardware: HardwareSpec
    workload: WorkloadSpec
    sla: SLASpec = Field(default_factory=SLASpec)
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    budget: BudgetSpec
    quality: QualitySpec = Field(default_factory=QualitySpec)
    storage: str | None = Field(None, description=f"Database URL; default {DEFAULT_STORAGE}.")
    runs_dir: str = Field("tuner-runs", description="Where trial logs and files are written.")

    @field_validator("name")
    @classmethod
    def _a_name_not_a_path(cls, name: str) -> str:
        problem = name_problem(name)
        if problem:
            raise ValueError(problem)
        return name

    @model_validator(mode="after")
    def _a_load_search_has_a_target(self) -> StudySpec:
        w = self.workload
        auto = ("concurrency" if w.concurrency == "auto" and w.arrival == "concurrency"
                else "request_rates" if w.request_rates == "auto" else None)
        if auto and self.sla.to_sla().is_empty():
            raise ValueError(
                f"workload.{auto}: auto searches for the highest load that meets the SLA, and "
                "the sla sets no target: set sla.ttft_p90_ms or sla.min_tok_s_per_user_p90, or "
                f"list the {auto.replace('_', ' ')} to measure")
        return self


def load_spec(path: Path) -> StudySpec:
    spec = load_model(StudySpec, read_yaml(path, "study spec"), str(path))
    w = spec.workload
    if w.prompt_file and not Path(w.prompt_file).is_absolute():
        # Relative to the spec, like search_space, so a spec and its data travel together.
        absolute = str((path.parent / w.prompt_file).resolve())
        spec = spec.model_copy(update={"workload": w.model_copy(update={"prompt_file": absolute})})
    tasks = spec.quality.tasks
    if tasks is not None and not Path(tasks.file).is_absolute():
        absolute = str((path.parent / tasks.file).resolve())
        quality = spec.quality.model_copy(update={"tasks": tasks.model_copy(
            update={"file": absolute})})
        spec = spec.model_copy(update={"quality": quality})
    return spec


def resolve_space_path(spec: StudySpec, spec_path: Path) -> Path:
    """A bare name is looked up in the project's search_spaces/; anything else is a path
    relative to the spec file."""
    ref = spec.search_space
    if "/" not in ref and not ref.endswith((".yaml", ".yml")):
        return search_spaces_dir() / f"{ref}.yaml"
    p = Path(ref)
    return p if p.is_absolute() else (spec_path.parent / p)


def search_spaces_dir() -> Path:
    from tuner import shipped

    return shipped("search_spaces")
