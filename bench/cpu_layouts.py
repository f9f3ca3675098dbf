"""Which CPU trial layout measures what a deployment would serve: one TP1 configuration of the tiny
gpt-oss served in turn in each layout (servers interleaved A B C, A B C, ... so that the
machine's drift falls on every layout alike), each measured by tuner's load generator at one
concurrency. Run by hand (it starts vLLM):

    flock /tmp/tuner-vllm.lock .venv/bin/python -m bench.cpu_layouts [--servers 2] [--rounds 6]

`--smoke`: one server per layout, 2 rounds of 8 requests at c=4, each server the repository's
fake engine (tuner.testing.fake_engine) started through the same adapter, launcher and layouts
(seconds; its figures are the fake's timetable, not vLLM's).

Layouts (on the first two cores):
- `one core`: every process of the server and the load generator on core 0 (tuner before the
  layout: the trial's slot was its ranks' cores only);
- `compute | frontend`: the rank's OpenMP threads on core 0, the API server, the engine core and
  the load generator on core 1 (tuner.serve.cpu_layout, what a trial does now);
- `vLLM default`: no affinity set by tuner, vLLM's own binding (`auto`: the rank on core 0, core 1
  reserved for the rest), the load generator wherever the kernel puts it.

Printed per server: output tok/s at the level (mean of its rounds) and the rounds' spread
(sd/mean); then per layout the median over its servers and the ratio to `compute | frontend`.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
from pathlib import Path

from bench.tiny_vllm import SMOKE_HEADER, fake_engine, tiny_vllm
from tuner.measure.loadgen import Repeats, run_sweep
from tuner.measure.prompts import sweep_prompts
from tuner.serve.cpu_layout import CpuLayout, plan_layout, thread_held_to
from tuner.serve.engines import get_adapter
from tuner.serve.hardware import cpu_inventory
from tuner.serve.launcher import ServerProcess, free_port
from tuner.spec.study_spec import WorkloadSpec

LAYOUTS = ("one core", "compute | frontend", "vLLM default")


def serve(layout: str, settings, config: dict, cores: list[int], run_dir: Path):
    inv = cpu_inventory()
    plan = get_adapter("vllm").launch_plan(config, settings, host="127.0.0.1",
                                           port=free_port(), inventory=inv, devices=cores)
    if layout == "one core":
        held = CpuLayout(((cores[0],),), (cores[0],), (cores[0],))
        return plan, ServerProcess(plan, run_dir, cpus=held.slot, layout=held), held.client
    if layout == "compute | frontend":
        held = plan_layout(cores, 1, 1)
        return plan, ServerProcess(plan, run_dir, cpus=held.slot, layout=held), held.client
    plan.env = {k: v for k, v in plan.env.items() if k != "VLLM_CPU_OMP_THREADS_BIND"}
    return plan, ServerProcess(plan, run_dir), None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=".tuner/models/tiny-gpt-oss")
    p.add_argument("--servers", type=int, default=2, help="servers per layout")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--requests", type=int, default=48, help="requests per round")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--max-num-seqs", type=int, default=16)
    p.add_argument("--max-num-batched-tokens", type=int, default=2048)
    p.add_argument("--smoke", action="store_true",
                   help="seconds: 1 server per layout, 2 short rounds, on the fake engine")
    a = p.parse_args()
    if a.smoke:
        a.servers, a.concurrency, a.requests, a.rounds = 1, 4, 8, 2
        print(SMOKE_HEADER, flush=True)

    model, vocab, settings = tiny_vllm(a.model)
    config = {"tensor_parallel_size": 1, "max_batch_size": a.max_num_seqs,
              "max_num_tokens": a.max_num_batched_tokens}
    cores = list(cpu_inventory().devices[:2])
    w = WorkloadSpec(prompt_source="corpus", input_len=64, output_len=64,
                     concurrency=[a.concurrency], requests_per_level=a.requests)
    prompts = sweep_prompts(w, Path(model), vocab, a.requests * a.rounds + 8)
    rows: dict[str, list[tuple[float, float]]] = {name: [] for name in LAYOUTS}
    with tempfile.TemporaryDirectory() as tmp:
        if a.smoke:
            settings = fake_engine(settings, Path(tmp) / "fake")
        for k in range(a.servers):
            for name in LAYOUTS:
                plan, server, client = serve(name, dataclasses.replace(settings), config, cores,
                                             Path(tmp) / f"{k}-{LAYOUTS.index(name)}")
                server.start()
                try:
                    server.wait_ready(300)
                    with thread_held_to(client):
                        # Every round, however close the first ones agree (no early stop).
                        (run,) = run_sweep(plan.base_url, plan.model, prompts, [a.concurrency],
                                           a.requests, 64, 8, 120,
                                           repeats=Repeats(a.rounds, ci_target=0.0))
                    rounds = [r.output_tok_s for r in run.rounds]
                finally:
                    server.stop()
                mean = statistics.mean(rounds)
                spread = statistics.stdev(rounds) / mean if len(rounds) > 1 else 0.0
                rows[name].append((mean, spread))
                print(f"server {k} {name:20} {mean:8,.0f} tok/s  rounds vary {spread:5.1%}",
                      flush=True)
    base = statistics.median(m for m, _ in rows["compute | frontend"])
    print(f"\n{a.servers} servers per layout, c={a.concurrency}, {a.rounds} rounds of "
          f"{a.requests} requests, TP1 max-num-seqs {a.max_num_seqs}, max-num-batched-tokens "
          f"{a.max_num_batched_tokens}")
    print(f"{'layout':22}{'median tok/s':>14}{'vs compute|frontend':>22}{'round spread':>14}")
    for name, values in rows.items():
        med = statistics.median(m for m, _ in values)
        spread = statistics.median(s for _, s in values)
        print(f"{name:22}{med:>14,.0f}{med / base:>22.2f}{spread:>14.1%}")


if __name__ == "__main__":
    main()
