"""Where a command's CPU goes, by kind of process: runs the command, reads every process's CPU
time from /proc every `--every` seconds while it runs, and prints CPU-seconds per kind (vLLM's
API server, engine core and worker, pytest, the tuner CLI, ...). Run by hand, for example on the
whole suite:

    .venv/bin/python bench/cpu_by_process.py -- make test

`/usr/bin/time` counts only the processes it waits for; vLLM's engine core and workers are
reparented when their server's process group is killed, so their CPU is missing there. This
reads them all. A process is counted from its first sample (from 0 if it started after this
script did) to its last, so up to `--every` seconds of each process's end can be missed.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")
# (what a process's command line or name contains, its kind), first match wins: programs
# first, since a test's temporary paths put "pytest" into many command lines. vLLM names its
# processes itself (setproctitle): VLLM::EngineCore, VLLM::Worker_TP0, ...; pytest-xdist names
# its workers "[pytest-xdist running] <test>".
KINDS = (
    ("EngineCore", "vLLM engine core"),
    ("Worker", "vLLM worker"),
    ("vllm bench", "vllm bench serve"),
    ("vllm serve", "vLLM API server"),
    ("fake_engine.py", "tests' fake servers"),
    ("fake_openai_server.py", "tests' fake servers"),
    ("tuner.cli", "tuner CLI"),
    ("bin/tuner", "tuner CLI"),
    ("streamlit", "streamlit"),
    ("postgres", "PostgreSQL"),
    ("chrom", "Chromium"),
    ("pytest-xdist", "pytest workers"),
    ("-m pytest", "pytest (main)"),
)


def kind_of(pid: str) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        with open(f"/proc/{pid}/comm") as f:
            comm = f.read().strip()
    except OSError:
        return None  # gone already
    for needle, kind in KINDS:
        if needle in cmd or needle in comm:
            return kind
    return f"other ({comm})"


def cpu_and_start(pid: str) -> tuple[float, int] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # the name may hold spaces
    return (int(fields[11]) + int(fields[12])) / TICKS, int(fields[19])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--every", type=float, default=2.0, help="seconds between samples")
    p.add_argument("--top", type=int, default=12, help="kinds to print")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    a = p.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        sys.exit("command: give the command to measure after --, e.g. -- make test")

    with open("/proc/uptime") as f:
        began = float(f.read().split()[0]) * TICKS  # in the clock ticks of a start time
    seen: dict[tuple[str, int], list] = {}  # (pid, start) -> [cpu at first sample, last, kind]
    wall = time.monotonic()
    proc = subprocess.Popen(command)
    while proc.poll() is None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            got = cpu_and_start(pid)
            if got is None:
                continue
            cpu, start = got
            key = (pid, start)
            if key in seen:
                seen[key][1] = cpu
                if seen[key][2].startswith("other (python"):  # renamed after its start
                    seen[key][2] = kind_of(pid) or seen[key][2]
            elif (kind := kind_of(pid)) is not None:
                seen[key] = [0.0 if start > began else cpu, cpu, kind]
        time.sleep(a.every)
    wall = time.monotonic() - wall

    total: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    for first, last, kind in seen.values():
        total[kind] += last - first
        count[kind] += 1
    cores = len(os.sched_getaffinity(0))
    print(f"\n{' '.join(command)}: exit {proc.returncode}, {wall:,.0f} s, "
          f"{sum(total.values()):,.0f} CPU-s over {cores} cores "
          f"({sum(total.values()) / wall:.2f} busy on average)")
    print(f"{'kind':<28}{'processes':>10}{'CPU-s':>10}{'share':>8}")
    for kind, cpu in total.most_common(a.top):
        if cpu < 0.5:
            break
        print(f"{kind:<28}{count[kind]:>10}{cpu:>10,.0f}{cpu / sum(total.values()):>8.0%}")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
