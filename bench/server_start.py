"""What one tiny-model TP1 server costs to start, in vLLM's default process layout and with its
worker inside the engine core (`VLLM_ENABLE_V1_MULTIPROCESSING=0`). Run by hand (it starts vLLM):

    flock /tmp/tuner-vllm.lock .venv/bin/python -m bench.server_start [--pairs 3]

vLLM's CPU build runs a TP1 server as three processes by default: the API server, the engine
core it spawns, and one worker the engine core spawns (its multiprocess executor); each imports
vLLM and PyTorch in turn. With multiprocessing off, a TP1 server's engine core runs its model
itself (the uni executor): one process and one import fewer, but no OpenMP core binding either
(vLLM binds a rank's threads only in its multiprocess executor), so the server's threads go
where the process's CPU affinity lets them. The test suite's servers that run one at a time
use it (tests/conftest.py); trials and benches keep vLLM's default.

Each pair starts one server each way (alternating which goes first), the way a trial starts it
(vLLM adapter + launcher), waits until it is ready, streams `--requests` requests of 32/32 tokens
at c=4, and stops it. Printed per server and as medians: seconds to ready, seconds to the end of
the requests, and the CPU seconds of the server's processes, read just before the stop.

`--smoke`: one pair of 8 requests each, on the repository's fake engine (tuner.testing.fake_engine)
started through the same adapter and launcher (seconds). The fake is one process whichever way:
its start and CPU times are the fake's, and say nothing about vLLM's layouts.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

import psutil

from bench.tiny_vllm import SMOKE_HEADER, fake_engine, tiny_vllm
from tuner.measure.loadgen import run_sweep
from tuner.measure.prompts import synthetic_token_prompts
from tuner.serve.engines import get_adapter
from tuner.serve.hardware import cpu_inventory
from tuner.serve.launcher import ServerProcess, free_port, group_members

LAYOUTS = {"default (3 processes)": {},
           "worker in engine core (2)": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}}


def cpu_seconds(server: ServerProcess) -> float:
    total = 0.0
    for proc in group_members(server.pid, server.create_time or 0.0):
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.Error:  # a process that ended between listing and reading
            pass
    return total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=".tuner/models/tiny-gpt-oss")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--smoke", action="store_true",
                   help="seconds: 1 pair of 8 requests each, on the fake engine")
    a = p.parse_args()
    tmp = tempfile.TemporaryDirectory()
    if a.smoke:
        a.pairs, a.requests = 1, 8
        print(SMOKE_HEADER, flush=True)

    model, vocab, settings = tiny_vllm(a.model)
    if a.smoke:
        settings = fake_engine(settings, Path(tmp.name) / "fake")
    inv = cpu_inventory()
    settings_of = {layout: dataclasses.replace(settings, env={**settings.env, **extra})
                   for layout, extra in LAYOUTS.items()}
    rows: dict[str, list[tuple[float, float, float]]] = {layout: [] for layout in LAYOUTS}
    with tmp:
        for pair in range(a.pairs):
            order = list(LAYOUTS) if pair % 2 == 0 else list(reversed(LAYOUTS))
            for layout in order:
                plan = get_adapter("vllm").launch_plan(
                    {"tensor_parallel_size": 1, "max_num_seqs": 16}, settings_of[layout],
                    host="127.0.0.1", port=free_port(), inventory=inv, devices=list(inv.devices))
                run_dir = Path(tmp.name) / f"{pair}-{list(LAYOUTS).index(layout)}"
                server = ServerProcess(plan, run_dir)
                started = time.time()
                server.start()
                try:
                    ready = server.wait_ready(300)
                    prompts = synthetic_token_prompts(a.requests + 2, 32, vocab, pair)
                    (run,) = run_sweep(plan.base_url, model, prompts, [4], a.requests, 32, 2, 120)
                    bad = sum(not r.ok for r in run.results)
                    if bad:
                        raise SystemExit(f"{layout}: {bad} of {len(run.results)} requests failed")
                    done = time.time() - started
                    cpu = cpu_seconds(server)
                finally:
                    server.stop()
                rows[layout].append((ready, done, cpu))
                print(f"pair {pair} {layout:26} ready {ready:5.1f} s  done {done:5.1f} s  "
                      f"server CPU {cpu:5.1f} s", flush=True)

    print(f"\nmedians over {a.pairs} servers each ({len(inv.devices)} cores; {a.requests} "
          "requests of 32/32 tokens at c=4 after ready)")
    print(f"{'layout':28}{'to ready s':>12}{'to done s':>12}{'server CPU-s':>14}")
    for layout, values in rows.items():
        ready, done, cpu = (statistics.median(v[i] for v in values) for i in range(3))
        print(f"{layout:28}{ready:>12.1f}{done:>12.1f}{cpu:>14.1f}")


if __name__ == "__main__":
    main()
