"""A trial's server log for its page: the file when it lies in the study's run directory, else
the tail the store kept.

A database row names the log file; the dashboard reads it only inside the study's run directory
(`runs_dir/<study>`, as `tuner run` lays it out), so a row naming any other path (a crafted
database, `/etc/shadow`) is never read and served to whoever can reach the dashboard.
"""

from __future__ import annotations

from pathlib import Path

from tuner.spec.study_spec import StudySpec
from tuner.store import StudyRecord, TrialRecord, sqlite_file

__all__ = ["log_tail", "run_dirs"]


def run_dirs(study: StudyRecord, url: str) -> list[Path]:
    """The study's run directory, resolved: a relative `runs_dir` from the current folder and
    from the database's folder (where `tuner run` usually ran)."""
    runs = Path(study.spec.get("runs_dir") or StudySpec.model_fields["runs_dir"].default)
    base = runs / study.name
    if base.is_absolute():
        return [base.resolve()]
    found = [(Path.cwd() / base).resolve()]
    db = sqlite_file(url)
    if db is not None:
        found.append((db.resolve().parent / base).resolve())
    return list(dict.fromkeys(found))


def _candidates(log_path: str, url: str) -> list[Path]:
    path = Path(log_path)
    if path.is_absolute():
        return [path]
    found = [Path.cwd() / path]
    db = sqlite_file(url)
    if db is not None:
        found.append(db.resolve().parent / path)
    return found


def log_tail(study: StudyRecord, trial: TrialRecord, url: str, *,
             lines: int = 80) -> tuple[str | None, str]:
    """The end of the trial's server log and where it came from.

    The log file when it is readable here and inside the study's run directory, else the tail
    the store kept.
    """
    tried: list[str] = []
    outside: list[str] = []
    if trial.log_path:
        allowed = run_dirs(study, url)
        for c in _candidates(trial.log_path, url):
            real = c.resolve()  # through symlinks and `..`: where the read would really go
            if not any(real.is_relative_to(d) for d in allowed):
                outside.append(str(c))
                continue
            tried.append(str(c))
            try:
                text = real.read_text(errors="replace")
            except OSError:
                continue
            return "\n".join(text.splitlines()[-lines:]), f"last {lines} lines of {c}"
    why = []
    if tried:
        why.append(f"{', '.join(tried)} is not readable here")
    if outside:
        why.append(f"the stored log path {trial.log_path} is outside the study's run directory "
                   f"({', '.join(map(str, run_dirs(study, url)))}), so it is not read")
    if trial.log_tail:
        where = f" ({'; '.join(why)})" if why else ""
        return trial.log_tail, "tail kept in the database" + where
    if why:
        return None, f"no log: {'; '.join(why)}, and none was stored"
    if trial.launch_plan is None:
        return None, "no server log: this trial never launched a server"
    return None, "no server log was recorded for this trial"
