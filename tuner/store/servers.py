"""The `Store`'s server rows: each launched engine server, and the tuner process that owns it."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import select, update

from db.models import ServerModel, TrialModel
from tuner.store.records import ServerRecord
from tuner.store.rows import _now, _server_record
from tuner.store.session import StoreBase


class ServerRows(StoreBase):
    """Launched servers and their owners, so a later run reaps only what a dead tuner left."""

    def record_server(
        self, trial_id: int, *, host: str, pid: int, pgid: int, create_time: float,
        log_path: str, owner_pid: int, owner_create_time: float,
    ) -> None:
        """Record a launched server and the tuner process that owns it (`owner_*`: pid and
        start time), so a later run can reap it if that process dies, and only then."""
        with self._session(f"record the server of trial id {trial_id}") as session:
            self._trial_row(session, trial_id)
            session.add(
                ServerModel(
                    trial_id=trial_id,
                    host=host,
                    pid=pid,
                    pgid=pgid,
                    create_time=create_time,
                    log_path=log_path,
                    started_at=_now(),
                    owner_pid=owner_pid,
                    owner_create_time=owner_create_time,
                )
            )

    def record_start_phases(self, trial_id: int, pid: int, phases: list[tuple[str, float]]
                            ) -> None:
        """Store where the start of the trial's server `pid` went, phase by phase."""
        with self._session(f"record the start of the server of trial id {trial_id}") as session:
            session.execute(update(ServerModel)
                            .where(ServerModel.trial_id == trial_id, ServerModel.pid == pid)
                            .values(start_phases=[[name, s] for name, s in phases]))

    def mark_server_stopped(self, trial_id: int) -> None:
        """Mark every still-running server of the trial stopped now (idempotent)."""
        with self._session(f"mark the server of trial id {trial_id} stopped") as session:
            session.execute(
                update(ServerModel)
                .where(ServerModel.trial_id == trial_id, ServerModel.stopped_at.is_(None))
                .values(stopped_at=_now())
            )

    def servers(self, trial_id: int) -> list[ServerRecord]:
        """The servers a trial launched, in order (its run, then any confirmation's)."""
        with self._session(f"read the servers of trial id {trial_id}") as session:
            rows = session.scalars(select(ServerModel).where(ServerModel.trial_id == trial_id)
                                   .order_by(ServerModel.id))
            return [_server_record(row) for row in rows]

    def unstopped_servers(self, host: str) -> list[ServerRecord]:
        """Servers on `host` never marked stopped, oldest first. A row from before servers
        carried their owner names its trial's worker pid instead (start time unknown)."""
        with self._session(f"read the servers on {host}") as session:
            query = (
                select(ServerModel, TrialModel.worker_pid)
                .join(TrialModel, TrialModel.id == ServerModel.trial_id)
                .where(ServerModel.host == host, ServerModel.stopped_at.is_(None))
                .order_by(ServerModel.started_at, ServerModel.id)
            )
            records = [(_server_record(row), pid) for row, pid in session.execute(query)]
            return [r if r.owner_pid is not None else replace(r, owner_pid=pid)
                    for r, pid in records]

