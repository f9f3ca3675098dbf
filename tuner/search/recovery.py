"""Recovery after a crash: servers left by a dead tuner on this host are stopped, and the trials
of dead or silent workers are marked interrupted (Optuna retries them once)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import psutil

from tuner.search.bridge import fail_interrupted, fail_stale, running
from tuner.search.context import StudyContext
from tuner.serve.failures import read_log_tail
from tuner.serve.launcher import stop_group
from tuner.store import ServerRecord

if TYPE_CHECKING:
    import optuna

# How often a worker waiting on another looks at the store again: for the reference answers it
# computes, or for trials it runs that end (then there is nothing left) or go stale (then their
# retry is this worker's). One query each time, so a worker ends within seconds of a study's
# last trial rather than a heartbeat interval (30 s) later.
OTHER_WORKER_POLL_S = 2.0


def worker_id() -> str:
    pid, created = this_process()
    return f"{pid}:{created:.3f}"


def this_process() -> tuple[int, float]:
    """This tuner process as a server's owner: its pid and start time."""
    me = psutil.Process()
    return me.pid, me.create_time()


def worker_alive(worker: str | None) -> bool:
    try:
        pid, created = worker.split(":") if worker else ("", "")
        return abs(psutil.Process(int(pid)).create_time() - float(created)) < 0.01
    except (ValueError, psutil.Error):
        return False


def recover(ctx: StudyContext, study: optuna.Study) -> None:
    """Reap servers left by a dead tuner on this host; mark its unfinished trials failed."""
    host = ctx.inventory.host
    for server in ctx.store.unstopped_servers(host):
        if _owner_alive(server):  # another worker on this node, running its own trial
            continue
        left = stop_group(server.pgid, server.create_time, grace_s=10)
        ctx.store.mark_server_stopped(server.trial_id)
        if left:
            ctx.say(f"stopped {left} leftover server process(es) of an interrupted trial "
                    f"(pid {server.pid})")
    for ft in running(study):
        worker = ft.user_attrs.get("worker")
        # No worker yet: another worker on this node is starting it (heartbeats judge the rest).
        if ft.user_attrs.get("worker_host") != host or worker is None or worker_alive(worker):
            continue
        reason = "interrupted: the tuner process running this trial died"
        fail_interrupted(study, ft)
        record = ctx.store.trial(ctx.name, ft.number)
        if record is not None and record.state == "running":
            ctx.store.finish_trial(record.id, state="failed", failure_kind="interrupted",
                                   failure_reason=reason, log_tail=read_log_tail(record.log_path))
        ctx.say(f"trial {ft.number} was interrupted by a crash of its tuner: marked failed")


def _owner_alive(server: ServerRecord) -> bool:
    """Whether the tuner that launched this server still runs it: the server's leader is the
    recorded process and still the child of its recorded owner, which is the same process that
    launched it (its start time too, where the row has it)."""
    try:
        leader = psutil.Process(server.pid)
        if server.owner_pid is None or leader.ppid() != server.owner_pid:
            return False
        if abs(leader.create_time() - server.create_time) >= 1.0:
            return False
        if server.owner_create_time is None:  # a row from before servers carried their owner
            return True
        return abs(psutil.Process(server.owner_pid).create_time()
                   - server.owner_create_time) < 0.01
    except psutil.Error:
        return False


def reap_stale(ctx: StudyContext, study: optuna.Study) -> None:
    """Fail the trials of workers that stopped sending heartbeats (Optuna enqueues each for one
    retry), mark them interrupted in tuner's table and, on this node, stop their servers."""
    failed = fail_stale(study)
    held = ctx.store.running_trials(ctx.name)
    for record in [r for r in held if r.number in failed]:
        if record.worker_host == ctx.inventory.host:
            for server in ctx.store.unstopped_servers(ctx.inventory.host):
                if server.trial_id == record.id:
                    stop_group(server.pgid, server.create_time, grace_s=10)
                    ctx.store.mark_server_stopped(record.id)
        reason = f"interrupted: worker {record.worker_host} stopped sending heartbeats"
        if ctx.store.interrupt_trial(record.id, reason=reason,
                                     log_tail=read_log_tail(record.log_path)):
            ctx.say(f"trial {record.number} {reason}: marked failed, to be retried once")
