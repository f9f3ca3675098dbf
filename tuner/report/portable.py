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
ROUTER_VAR, PORT_VAR = "TUNER_ROUTER", "TUNER_PORT"


def portable_argv(argv: list[str], *, engine: str, resolved_model: str, model: str
                  ) -> list[str]:
    """`argv` with its executable (argv[0]) as `engine` and every `resolved_model` as `model`.
    A container's command (argv[0] is its runtime) is left as it is."""
    if not argv:
        return argv
    return [engine] + [model if a == resolved_model else a for a in argv[1:]]


def _words(argv: list[str], model: str, shell: dict[int, str] | None = None) -> str:
    """argv as shell words: the engine and the model from their variables, and the words at
    the indices of `shell` as the shell expressions given there."""
    shell = shell or {}
    return " ".join(shell[i] if i in shell else f'"${ENGINE_VAR}"' if i == 0
                    else '"$' + MODEL_VAR + '"' if a == model else shlex.quote(a)
                    for i, a in enumerate(argv))


def _assigns(env: dict[str, str]) -> str:
    return "".join(f"{k}={shlex.quote(v)} " for k, v in env.items())


def _preamble(header: str, engine: str, model: str) -> str:
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
    )


def launch_script(argv: list[str], env: dict[str, str], *, engine: str, model: str,
                  header: str) -> str:
    """launch.sh: the command with TUNER_ENGINE and TUNER_MODEL read from the environment (the
    spec's names by default); a relative model path is taken from where the script is run."""
    return (_preamble(header, engine, model)
            + f"exec env {_assigns(env)}{_words(argv, model)} \"$@\"\n")


def replicas_launch_script(replicas: list[tuple[list[str], dict[str, str]]],
                           router: list[str], *, engine: str, model: str, router_name: str,
                           host: str, port: int, header: str) -> str:
    """launch.sh of replicas behind a router: replica i's command (argv, env; it serves on
    host:$TUNER_PORT + i) in the background, then the router in front on $TUNER_PORT (`port` by
    default), whose workers are the replicas' addresses; the first of them to exit stops the
    others and gives the script its status. Arguments go to every replica's engine."""
    def at(offset: int) -> str:
        return f'"$(({PORT_VAR} + {offset}))"' if offset else f'"${PORT_VAR}"'

    body = [_preamble(header, engine, model),
            f"# The router (on PATH, or set {ROUTER_VAR}) on ${PORT_VAR}; replica i on "
            f"${PORT_VAR} + i.\n",
            f'{ROUTER_VAR}="${{{ROUTER_VAR}:-{router_name}}}"\n',
            f'{PORT_VAR}="${{{PORT_VAR}:-{port}}}"\n',
            "pids=()\n",
            # Whatever ends the script (a member's exit, a signal) stops every member.
            'trap \'kill "${pids[@]}" 2>/dev/null || true\' EXIT\n',
            "trap 'exit 143' INT TERM\n"]
    for i, (argv, env) in enumerate(replicas, start=1):
        shell = {argv.index("--port") + 1: at(i)}
        body.append(f'env {_assigns(env)}{_words(argv, model, shell)} "$@" &\npids+=($!)\n')
    words = [f'"${ROUTER_VAR}"']
    for a in router[1:]:
        worker = next((i for i in range(1, len(replicas) + 1)
                       if a == f"http://{host}:{port + i}"), None)
        words.append(f"http://{host}:{at(worker)}" if worker else shlex.quote(a))
    words[router.index("--port") + 1] = at(0)
    body += [f"{' '.join(words)} &\npids+=($!)\n",
             "# The deployment lives while every member does: the first to exit ends it.\n",
             'wait -n "${pids[@]}"\n']
    return "".join(body)
