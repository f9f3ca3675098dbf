"""The expected outcomes that end a command, apart from bugs.

Each carries one line naming the problem and the fix, and the exit status the CLI returns.
"""

from __future__ import annotations

# Exit statuses a deploy pipeline can rely on.
EXIT_OK = 0
EXIT_BAD_INPUT = 2  # a spec, flag, file or database that cannot be used as given
EXIT_NO_RESULT = 3  # the study has no trial that met the SLA (nothing to export)
EXIT_INTERRUPTED = 130  # Ctrl-C / SIGTERM


class TunerError(Exception):
    exit_code = EXIT_BAD_INPUT


class BadInput(TunerError):
    """Input that cannot be used as given: the message names the field and the fix."""


class NoResult(TunerError):
    exit_code = EXIT_NO_RESULT
