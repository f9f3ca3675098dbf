"""A trial's `vllm serve` command read by vLLM's own parser before any server starts, so a typo
in `engine.args` (`max-modle-len`) ends the study in seconds with vLLM's own words, not after a
server start per trial.

The parser is the engine's: it runs in the Python the `vllm` executable runs in (its `#!` line),
on the exact argv and config file a trial would start with. Importing vLLM costs a few seconds,
so a command it accepted is remembered ($XDG_CACHE_HOME/tuner/vllm-commands.json, keyed by the
interpreter, the executable and the command) and not checked again. Where there is no such
interpreter (a container, a wrapper script) or vLLM's parser cannot be found, nothing is
checked and the first trial's start says what the engine thinks.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from tuner.serve.engines.base import LaunchPlan

# Run in the engine's interpreter with the argv after `vllm serve`; exit 3: rejected (the
# reason on stderr's last line), 0: accepted, 4: no parser found in this vLLM.
_CHECK = r"""
import sys
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
except ImportError:
    try:
        from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
    except ImportError:
        sys.exit(4)
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    try:
        from vllm.utils import FlexibleArgumentParser
    except ImportError:
        sys.exit(4)
parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
try:
    validate_parsed_serve_args(parser.parse_args(sys.argv[1:]))
except SystemExit as e:
    sys.exit(3 if e.code else 0)
except (TypeError, ValueError) as e:
    print(e, file=sys.stderr)
    sys.exit(3)
"""
TIMEOUT_S = 120


def interpreter_of(executable: str) -> str | None:
    """The Python a console script runs in (its `#!` line), or None."""
    try:
        with open(executable, "rb") as f:
            first = f.readline(400).decode(errors="replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    python = words[-1] if words and words[0].endswith("/env") else (words[0] if words else "")
    return python if Path(python).name.startswith("python") else None


def rejection(plan: LaunchPlan, say) -> str | None:
    """Why vLLM's parser rejects this plan's command, or None (accepted, or not checkable)."""
    python = interpreter_of(plan.argv[0])
    if python is None or plan.argv[1:2] != ["serve"]:
        return None
    key = _key(python, plan)
    cache = _cache_file()
    if key in _read(cache):
        return None
    with tempfile.TemporaryDirectory(prefix="tuner-vllm-args-") as folder:
        for name, content in plan.files.items():
            (Path(folder) / name).write_text(content)
        start = time.monotonic()
        try:
            proc = subprocess.run([python, "-c", _CHECK, *plan.argv[2:]], cwd=folder,
                                  capture_output=True, text=True, timeout=TIMEOUT_S,
                                  env={**os.environ, **plan.env})
        except (OSError, subprocess.TimeoutExpired):
            return None
    if proc.returncode == 3:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        return (lines[-1] if lines else "rejected").removeprefix("vllm serve: error: ")
    if proc.returncode == 0:
        say(f"engine command read by vLLM's own parser: accepted "
            f"({time.monotonic() - start:.1f} s; remembered for these args)")
        _write(cache, key)
    return None


def _key(python: str, plan: LaunchPlan) -> str:
    def stamp(path: str) -> str:
        try:
            p = Path(path).resolve()
            return f"{p}:{p.stat().st_mtime_ns}"
        except OSError:
            return path

    # The model's path and the port do not change what the parser accepts: left out, so every
    # study of these args on this install shares the answer.
    argv = ["MODEL" if a == plan.model else ("PORT" if a == str(plan.port) else a)
            for a in plan.argv[2:]]
    what = [stamp(python), stamp(plan.argv[0]), argv, sorted(plan.files.items())]
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()


def _cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tuner" / "vllm-commands.json"


def _read(path: Path) -> set[str]:
    try:
        return set(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return set()


def _write(path: Path, key: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        keys = sorted(_read(path) | {key})[-500:]
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(keys))
        tmp.replace(path)
    except OSError:
        pass  # not remembered: checked again next time
