"""What the quality gate sees on real servers: how far apart the two tokens are where a
configuration's greedy answers first leave the reference's, for configurations that only change
the numerics (another rank layout, speculation) and for real faults (a coarse KV cache, another
RoPE base, a repetition penalty). The tie-aware rule's defaults (`quality.near_tie_margin`,
`quality.max_diverging`) are chosen from it. Run by hand (it starts vLLM, one server at a time):

    flock /tmp/tuner-vllm.lock .venv/bin/python -m bench.quality_near_ties [--save answers.json]
    .venv/bin/python -m bench.quality_near_ties --load answers.json      # re-judge, no server

Each configuration answers the gate's prompts (the spec's defaults: 32 corpus prompts of 32
tokens, 32 tokens each, greedy, top 5 log-probabilities, one at a time) on a server of its own,
the way a trial's does. Printed per configuration: identical / near-tie / diverging answers at
the default margin, every flip's gap (the narrower of the two sides' gaps, in nats;
`out` when a token was not in the other side's top log-probabilities; `!` when the answer picks
tokens its own log-probabilities rank lower: its decoding changed), the mean log-probability
divergence over the shared contexts, and the diverging counts at other margins.

`--smoke`: the reference and "TP1 again, new server" only, each on the repository's fake engine
(tuner.testing.fake_engine) started through the same adapter and launcher, answering the gate's real
prompts (seconds). The fake's answers and log-probabilities are a function of the prompt, not a
model's numerics, so it checks the path (prompts, answers, comparison, table), not the margins;
the faults need vLLM.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import tempfile
from pathlib import Path

from bench.tiny_vllm import SMOKE_HEADER, fake_engine, tiny_vllm
from tuner.measure.quality import Answer, answer_all, quality_prompts
from tuner.measure.quality_compare import compare, decodes_greedily, verdict
from tuner.serve.engines import EngineSettings, get_adapter
from tuner.serve.hardware import cpu_inventory
from tuner.serve.launcher import ServerProcess, free_port
from tuner.spec.quality_spec import QualitySpec
from tuner.spec.study_spec import WorkloadSpec

NGRAM = {"speculative_method": "ngram", "num_speculative_tokens": 2}
# name -> (canonical parameters, extra engine args)
CONFIGS: dict[str, tuple[dict, dict]] = {
    "reference (TP1)": ({}, {}),
    "TP1 again, new server": ({}, {}),
    "TP1 + ngram": (NGRAM, {}),
    "TP2": ({"tensor_parallel_size": 2}, {}),
    "TP2 + ngram": ({"tensor_parallel_size": 2, **NGRAM}, {}),
    "fault: KV fp8_e5m2": ({"kv_cache_dtype": "fp8_e5m2"}, {}),
    "fault: rope_theta 10000": ({}, "rope"),
    "fault: repetition penalty 1.2": ({}, {"override-generation-config":
                                           {"repetition_penalty": 1.2}}),
}
MARGINS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3)


def rope_override(model: str, theta: float) -> dict:
    """`--hf-overrides` that serves the model with another RoPE base (the rest of its RoPE
    parameters as the checkpoint has them)."""
    config = json.loads((Path(model) / "config.json").read_text())
    return {"hf-overrides": {"rope_parameters": {**config["rope_parameters"],
                                                 "rope_theta": theta}}}


def answers_of(params: dict, extra: dict, settings: EngineSettings, prompts, q: QualitySpec,
               run_dir: Path) -> list[Answer]:
    inv = cpu_inventory()
    settings = dataclasses.replace(settings, args={**settings.args, **extra})
    plan = get_adapter("vllm").launch_plan(params, settings, host="127.0.0.1", port=free_port(),
                                           inventory=inv, devices=list(inv.devices))
    server = ServerProcess(plan, run_dir)
    server.start()
    try:
        server.wait_ready(300)
        answers, _ = answer_all(plan.base_url, "completions", plan.model, prompts, q, 120)
    finally:
        server.stop()
    return answers


def report(runs: dict[str, list[Answer]], q: QualitySpec) -> None:
    names = list(runs)
    ref = runs[names[0]]
    print(f"\nagainst {names[0]}, default margin {q.near_tie_margin:g} nats, "
          f"{len(ref)} prompts")
    print(f"{'configuration':32}{'ident':>6}{'tie':>5}{'div':>5}{'mean Δ nats':>13}  "
          f"{'diverging at margin ' + ' / '.join(f'{m:g}' for m in MARGINS):44}  flip gaps")
    for name in names[1:]:
        c = compare(ref, runs[name], q.near_tie_margin)
        gaps = []
        for i, (r, a) in enumerate(zip(ref, runs[name], strict=True)):
            _, flip = verdict(r, a, q.near_tie_margin, i, decodes_greedily(ref))
            if flip is not None:
                gaps.append(("out" if flip.gap is None else f"{flip.gap:.3g}")
                            + ("!" if flip.off_greedy is not None else ""))
        at = [compare(ref, runs[name], m).diverging for m in MARGINS]
        d = "-" if c.mean_logprob_divergence is None else f"{c.mean_logprob_divergence:.4f}"
        print(f"{name:32}{c.identical:>6}{c.near_ties:>5}{c.diverging:>5}{d:>13}  "
              f"{' / '.join(map(str, at)):44}  {' '.join(sorted(gaps, key=_order))}")


def _order(g: str) -> float:
    g = g.rstrip("!")
    return float("inf") if g == "out" else float(g)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=".tuner/models/tiny-gpt-oss")
    p.add_argument("--only", nargs="*", help="configurations to run (names as printed); the "
                   "reference always runs first")
    p.add_argument("--save", help="write every configuration's answers to this JSON file")
    p.add_argument("--load", help="judge the answers of an earlier --save; start no server")
    p.add_argument("--top-logprobs", type=int, default=QualitySpec().top_logprobs,
                   help="top log-probabilities asked per token (quality.top_logprobs)")
    p.add_argument("--smoke", action="store_true",
                   help="seconds: the reference and one other TP1 server, on the fake engine")
    a = p.parse_args()
    if a.smoke:
        a.only = ["TP1 again, new server"]
        print(SMOKE_HEADER, flush=True)
    q = QualitySpec(top_logprobs=a.top_logprobs)
    if a.load:
        saved = json.loads(Path(a.load).read_text())
        print(saved["machine"], f"top {saved.get('top_logprobs', '?')} log-probabilities")
        report({k: [Answer.from_dict(x) for x in v] for k, v in saved["runs"].items()}, q)
        return
    model, vocab, settings = tiny_vllm(a.model)
    workload = WorkloadSpec(prompt_source="corpus", input_len=64, output_len=64,
                            concurrency=[4], requests_per_level=8)
    prompts = quality_prompts(workload, q, Path(model), vocab)
    machine = f"{platform.processor() or platform.machine()}; {_cpu_model()}"
    print(machine)
    runs: dict[str, list[Answer]] = {}
    wanted = [n for n in CONFIGS if not a.only or n in a.only or n == next(iter(CONFIGS))]
    with tempfile.TemporaryDirectory() as tmp:
        if a.smoke:
            settings = fake_engine(settings, Path(tmp) / "fake")
        for k, name in enumerate(wanted):
            params, extra = CONFIGS[name]
            extra = rope_override(model, 10000.0) if extra == "rope" else extra
            runs[name] = answers_of(params, extra, settings, prompts, q, Path(tmp) / str(k))
            failed = sum(x.error is not None for x in runs[name])
            print(f"{name}: answered ({failed} failed)", flush=True)
    if a.save:
        Path(a.save).write_text(json.dumps({"machine": machine, "top_logprobs": a.top_logprobs,
                                            "runs": {
            k: [x.to_dict() for x in v] for k, v in runs.items()}}))
    report(runs, q)


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


if __name__ == "__main__":
    main()
