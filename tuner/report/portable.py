"""The launch command as another machine runs it: the engine and the model as the spec named
them, not as the study machine resolved them.

A trial runs `<clone>/.venv/bin/vllm serve <clone>/.tuner/models/tiny-gpt-oss ...`: paths of the
study machine that mean nothing on a deploy node. The export names the engine by the spec's
`engine.executable` where it gave one (else the engine's own name, found on PATH) and the model
by the spec's `model.path`; `launch.sh` reads both from the environment first (TUNER_ENGINE,
TUNER_MODEL), so a deploy points them at its own copies without editing the file.
"""

from __future__ import annotations

import shlex

ENGINE_VAR, MODEL_VAR = "TUNER_ENGINE", "TUNER_MODEL"


def portable_argv(argv: list[str], *, engine: str, resolved_model: str, model: str
                  ) -> list[str]:
    """`argv` with its executable (argv[0]) as `engine` and every `resolved_model` as `model`.
    A container's command (argv[0] is its runtime) is left as it is."""
    if not argv:
        return argv
    return [engine] + [model if a == resolved_model else a for a in argv[1:]]


def launch_script(argv: list[str], env: dict[str, str], *, engine: str, model: str,
                  header: str) -> str:
    """launch.sh: the command with TUNER_ENGINE and TUNER_MODEL read from the environment (the
    spec's names by default); a relative model path is taken from where the script is run."""
    words = [f'"${ENGINE_VAR}"' if i == 0 else ('"$' + MODEL_VAR + '"' if a == model
                                                else shlex.quote(a))
             for i, a in enumerate(argv)]
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (
        "#!/usr/bin/env bash\n"
        f"{header}\n"
        "set -euo pipefail\n"
        f"# The engine (on PATH, or set {ENGINE_VAR}) and the model the study served, as its spec\n"
        f"# named them (set {MODEL_VAR} to this machine's copy).\n"
        f'{ENGINE_VAR}="${{{ENGINE_VAR}:-{engine}}}"\n'
        f'{MODEL_VAR}="${{{MODEL_VAR}:-{model}}}"\n'
        f'if [ -e "${MODEL_VAR}" ]; then {MODEL_VAR}="$(realpath "${MODEL_VAR}")"; fi\n'
        'cd "$(dirname "$0")"\n'
        f"exec env {assigns + ' ' if assigns else ''}{' '.join(words)} \"$@\"\n"
    )
