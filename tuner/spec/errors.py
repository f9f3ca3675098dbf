"""The expected outcomes that end a command, apart from bugs.

Each carries one line naming the problem and the fix, and the exit status the CLI returns.
"""

from __future__ import annotations

# Exit statuses a deploy pipeline can rely on.
EXIT_OK = 0
EXIT_ERROR = 1  # an unexpected error inside a trial: a bug, recorded on the trial; the study stops
EXIT_BAD_INPUT = 2  # a spec, flag, file or database that cannot be used as given
EXIT_NO_RESULT = 3  # the study has no trial that met the SLA (nothing to export)
EXIT_INTERRUPTED = 130  # Ctrl-C / SIGTERM


class TunerError(Exception):
    exit_code = EXIT_BAD_INPUT


class BadInput(TunerError):
    """Input that cannot be used as given: the message names the field and the fix."""


class NoResult(TunerError):
    exit_code = EXIT_NO_RESULT


class TrialError(TunerError):
    """An unexpected error inside a trial (a bug, not the configuration's verdict): the trial
    is recorded as failed with kind `error` and its text, and the study stops rather than burn
    its budget on the same bug."""

    exit_code = EXIT_ERROR

    def __init__(self, trial: int, error: BaseException) -> None:
        self.trial = trial
        super().__init__(f"trial {trial} stopped on an unexpected error ({error_text(error)}); "
                         "it is recorded as failed (error) and counts toward no budget: report it, "
                         "then re-run the same command to resume the study")


def error_text(error: BaseException) -> str:
    """An exception in one line: its type and first line."""
    first = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__
