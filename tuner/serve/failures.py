"""Classifying why a server failed, from its exit status and log.

Kinds a study records: oom, crash, unsupported, invalid_argument, not_ready, timeout,
request_errors, interrupted, infeasible. The reason is the log line that gave it away (for a
segfault, with the native frame it happened in): the telling line nearest the end of the log,
where the server exited, short enough for a table.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

# What names a root cause, most specific first (the order only settles a line matching two).
# The matching line nearest the end of the log wins: a server logs benign warnings as it starts
# ("... is not supported, falling back"), and the error it exits on comes last.
_CAUSES: list[tuple[str, re.Pattern[str]]] = [
    ("oom", re.compile(r"out of memory|OutOfMemoryError|Cannot allocate memory|"
                       r"No available memory for the cache blocks|insufficient memory", re.I)),
    ("crash", re.compile(r"Segfault encountered|SIGSEGV|Segmentation fault|SIGBUS|SIGABRT|"
                         r"core dumped", re.I)),
    ("unsupported", re.compile(r"NotImplementedError|is not supported|not supported on", re.I)),
    ("invalid_argument", re.compile(r"error: (argument|unrecognized arguments)|invalid choice|"
                                    r"ValidationError|ValueError", re.I)),
]
# What follows a root cause (EngineDeadError, "see stack trace above"): a crash named by the
# first of them only when no cause is in the log at all.
_CONSEQUENCES = re.compile(r"died unexpectedly|EngineDeadError|terminated unexpectedly|"
                           r"Traceback \(most recent call last\)", re.I)
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (.+)')
REASON_CHARS = 300


def classify(log_text: str, returncode: int | None) -> tuple[str, str]:
    """(kind, reason) for a server that exited or stopped serving."""
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    for i in range(len(lines) - 1, -1, -1):
        for kind, pattern in _CAUSES:
            if pattern.search(lines[i]):
                return kind, _reason(lines, i)
    for i, line in enumerate(lines):
        if _CONSEQUENCES.search(line):
            return "crash", _reason(lines, i)
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return "crash", f"server killed by {name}"
    if returncode is not None:
        last = lines[-1][:REASON_CHARS] if lines else "no output"
        return "crash", f"server exited with status {returncode}: {last}"
    return "crash", "server stopped answering"


_BARE = re.compile(r"(raise \w+(Error|Exception)?|\w+(Error|Exception))\s*$")


def _reason(lines: list[str], i: int) -> str:
    reason = lines[i]
    if _BARE.search(reason):
        # An exception without a message: the frame that raised it is the telling part.
        for line in reversed(lines[max(0, i - 4) : i]):
            m = _FRAME.search(line)
            if m:
                exc = reason.split()[-1]
                return f"{exc} in {m.group(3)} ({m.group(1).split('/')[-1]}:{m.group(2)})"
    if "Segfault" in reason or "SIGSEGV" in reason:
        # The first native frame that is not the signal handler says where it happened.
        for line in lines[i + 1 : i + 8]:
            m = _FRAME.search(line)
            if m and "sigaction" not in m.group(1):
                where = f"{m.group(1).split('/')[-1]}:{m.group(2)}"
                reason = f"{reason.strip('! ')} in {m.group(3)[:80]} ({where})"
                break
    return reason[:REASON_CHARS]


def tail(text: str, n_lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-n_lines:])


def read_log_tail(path: str | None, n_lines: int = 40) -> str | None:
    """The last lines of a server log file; None when there is none or it cannot be read."""
    if not path:
        return None
    try:
        return tail(Path(path).read_text(errors="replace"), n_lines)
    except OSError:
        return None
