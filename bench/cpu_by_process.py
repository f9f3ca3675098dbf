"""Where a command's CPU goes, by kind of process: runs the command, reads every process's CPU
time (psutil) every `--every` seconds while it runs, and prints CPU-seconds per kind (vLLM's API
server, engine core and worker, pytest, the tuner CLI, ...). Run by hand, for example on the
whole suite:

    .venv/bin/python -m bench.cpu_by_process -- make test

`/usr/bin/time` counts only the processes it waits for; vLLM's engine core and workers are
reparented when their server's process group is killed, so their CPU is missing there. This
reads them all. A process is counted from its first sample (from 0 if it started after this
script did) to its last, so up to `--every` seconds of each process's end can be missed.

`--smoke`: measures a Python loop that keeps one core busy for 2 s, sampled every 0.2 s.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import time

import psutil

# (what a process's command line or name contains, its kind), first match wins: programs
# first, since a test's temporary paths put "pytest" into many command lines. vLLM names its
# processes itself (setproctitle): VLLM::EngineCore, VLLM::Worker_TP0, ...; pytest-xdist names
# its workers "[pytest-xdist running] <test>".
KINDS = (
    ("EngineCore", "vLLM engine core"),
    ("Worker", "vLLM worker"),
    ("vllm bench", "vllm bench serve"),
    ("vllm serve", "vLLM API server"),
    ("tuner.testing.fake_engine", "the fake engine"),
    ("tuner.cli", "tuner CLI"),
    ("bin/tuner", "tuner CLI"),
    ("streamlit", "streamlit"),
    ("postgres", "PostgreSQL"),
    ("chrom", "Chromium"),
    ("pytest-xdist", "pytest workers"),
    ("-m pytest", "pytest (main)"),
)

# What `--smoke` measures: one core busy for 2 s.
SMOKE_LOOP = ("import itertools, time; end = time.monotonic() + 2; "
              "any(time.monotonic() > end for _ in itertools.count())")


def kind_of(proc: psutil.Process) -> str | None:
    try:
        cmd, name = " ".join(proc.cmdline()), proc.name()
    except psutil.Error:
        return None  # gone already
    for needle, kind in KINDS:
        if needle in cmd or needle in name:
            return kind
    return f"other ({name})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--every", type=float, default=2.0, help="seconds between samples")
    p.add_argument("--top", type=int, default=12, help="kinds to print")
    p.add_argument("--smoke", action="store_true",
                   help="seconds: measure a Python loop that keeps one core busy for 2 s")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    a = p.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if a.smoke:
        if command:
            sys.exit("--smoke measures its own command: give none")
        command = [sys.executable, "-c", SMOKE_LOOP]
        a.every = 0.2
    if not command:
        sys.exit("command: give the command to measure after --, e.g. -- make test")

    began, since = time.time(), time.monotonic()
    seen: dict[tuple[int, float], list] = {}  # (pid, created) -> [cpu at first sample, last, kind]
    proc = subprocess.Popen(command)
    while proc.poll() is None:
        for other in psutil.process_iter(["cpu_times", "create_time"]):
            times, created = other.info["cpu_times"], other.info["create_time"]
            if times is None or created is None:
                continue  # gone, or not ours to read
            cpu = times.user + times.system
            key = (other.pid, created)
            if key in seen:
                seen[key][1] = cpu
                if seen[key][2].startswith("other (python"):  # renamed after its start
                    seen[key][2] = kind_of(other) or seen[key][2]
            elif (kind := kind_of(other)) is not None:
                seen[key] = [0.0 if created > began else cpu, cpu, kind]
        time.sleep(a.every)
    wall = time.monotonic() - since

    total: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    for first, last, kind in seen.values():
        total[kind] += last - first
        count[kind] += 1
    cpu_all = sum(total.values())
    print(f"\n{' '.join(command)}: exit {proc.returncode}, {wall:,.0f} s, "
          f"{cpu_all:,.0f} CPU-s over {len(psutil.Process().cpu_affinity())} cores "
          f"({cpu_all / wall:.2f} busy on average)")
    print(f"{'kind':<28}{'processes':>10}{'CPU-s':>10}{'share':>8}")
    for kind, cpu in total.most_common(a.top):
        if cpu < 0.5:
            break
        print(f"{kind:<28}{count[kind]:>10}{cpu:>10,.0f}{cpu / cpu_all:>8.0%}")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
