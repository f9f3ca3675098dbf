"""One study measuring on a machine's devices at a time, or said: a study that serves trials
holds a lock per device it may use (a core on a CPU node, a GPU index on a GPU node), and a
second study on any of the same devices is told who holds them at its start, or waits with
`--wait`. Two studies on one 2-core machine measured 101 and 91 tok/s/GPU where one alone
measured 506, and nothing said so.

The locks are advisory files (`fcntl.flock`, released by the kernel when the process ends, a
crash included) in $TUNER_LOCK_DIR, default the system's temporary folder, so every user of the
machine sees them. A folder where a lock cannot be made costs the check, never the study.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

LOCK_DIR_ENV = "TUNER_LOCK_DIR"


def lock_dir() -> Path:
    return Path(os.environ.get(LOCK_DIR_ENV) or tempfile.gettempdir())


def _lock_path(kind: str, device: int) -> Path:
    return lock_dir() / f"tuner-{kind}{device}.lock"


def _open(path: Path) -> int | None:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return None
    with suppress(OSError):  # another user's umask must not lock everyone else out
        os.fchmod(fd, 0o666)
    return fd


def _holder(fd: int) -> str:
    with suppress(OSError):
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
        if text:
            return text
    return "another process"


def _take(fd: int, *, block: bool) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


@contextmanager
def measuring_on(kind: str, devices: Sequence[int], who: str, *, wait: bool,
                 say: Callable[[str], None]) -> Iterator[list[str]]:
    """Hold this machine's `devices` of `kind` ("cpu" cores or "gpu" indices) while the block
    runs; yields who else held any of them at the start (empty: the devices were free).
    Without `wait`, a held device is said and the study goes on beside it; with `wait`, the
    study waits until every device is free."""
    fds = {d: fd for d in sorted(set(devices)) if (fd := _open(_lock_path(kind, d))) is not None}
    busy = {d: _holder(fd) for d, fd in fds.items() if not _take(fd, block=False)}
    holders = sorted(set(busy.values()))
    if busy:
        where = f"{kind} {', '.join(str(d) for d in sorted(busy))}"
        if wait:
            say(f"waiting: {'; '.join(holders)} is measuring on {where} of this machine")
            for d in sorted(busy):  # in device order, as every study takes them: no deadlock
                _take(fds[d], block=True)
            say("the devices are free: starting")
        else:
            say(f"warning: {'; '.join(holders)} is measuring on {where} of this machine: both "
                "studies' figures will be skewed (run one at a time, or pass --wait to wait)")
    for d, fd in fds.items():
        if d not in busy or wait:
            with suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{who} (pid {os.getpid()})".encode(), 0)
    try:
        yield holders
    finally:
        for fd in fds.values():
            os.close(fd)  # closing releases the lock
