"""Where a server's start goes, phase by phase, read from its log.

A study pays a server start per trial, so its phases decide what can be cut. vLLM stamps each
log line to the second (`INFO 12-07 14:27:39 [...]`) and names its process (`(APIServer
pid=..)`, `(EngineCore pid=..)`, `(Worker pid=..)` or `(Worker_TP0 pid=..)`). The phases end at
the first line of each milestone: the API server's first line (its Python and PyTorch imports),
the engine core's first, the first worker's, the weights loaded, the KV cache allocated and the
engine warmed up, the HTTP server listening; then ready (its health check answered). A phase is
known to the second, as the log stamps it; one a log does not show is left out.
"""

from __future__ import annotations

import datetime as dt
import re

# (phase, the first log line that ends it), in the order a vLLM server starts.
# The API server is `APIServer`, or `MainProcess` with data parallelism (then `ApiServer_N`
# and `EngineCore_DPN` per rank).
VLLM_MILESTONES: list[tuple[str, re.Pattern[str]]] = [
    ("process and imports", re.compile(r"^\((APIServer|MainProcess) pid=\d+\) \w+ \d")),
    ("engine core", re.compile(r"^\(EngineCore(_\w+)? pid=\d+\) \w+ \d")),
    ("workers", re.compile(r"^\(Worker(_\w+)? pid=\d+\) \w+ \d")),
    ("model load", re.compile(r"Loading weights took")),
    ("KV cache and warm-up", re.compile(r"init engine \(profile, create kv cache")),
    ("API server", re.compile(r"Starting vLLM server on")),
]
MILESTONES = {"vllm": VLLM_MILESTONES}
_STAMP = re.compile(r"\b(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})\b")


def _stamp(line: str, year: int) -> float | None:
    m = _STAMP.search(line)
    if not m:
        return None
    month, day, hour, minute, second = map(int, m.groups())
    return dt.datetime(year, month, day, hour, minute, second).timestamp()  # local time


def start_phases(engine: str, log_text: str, started: float, ready: float
                 ) -> list[tuple[str, float]]:
    """Seconds per start phase of a server launched at `started` and ready at `ready` (both
    Unix times), from its log; empty for an engine whose milestones are not known."""
    milestones = MILESTONES.get(engine)
    if not milestones:
        return []
    year = dt.datetime.fromtimestamp(started).year
    ends: list[tuple[str, float]] = []
    lines = log_text.splitlines()
    for name, pattern in milestones:
        at = next((_stamp(ln, year) for ln in lines if pattern.search(ln) and _stamp(ln, year)),
                  None)
        if at is not None:
            ends.append((name, at))
    out, previous = [], started
    for name, at in ends:
        # Stamps are whole seconds: a milestone stamped before the last one kept its order.
        at = max(at, previous)
        out.append((name, at - previous))
        previous = at
    out.append(("ready", max(0.0, ready - previous)))
    return out


def phases_line(phases: list[tuple[str, float]]) -> str:
    """The phases in one line, as each trial prints them."""
    return "start: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in phases)
