"""A stand-in for `vllm serve` with a scripted landscape, so the real study loop, launcher, load
generator and store run in fast tests without an engine.

It is started exactly as tuner starts vLLM (`EXECUTABLE serve MODEL --config config.yaml --host H
--port P`, see `fake_vllm`) or TensorRT-LLM (`EXECUTABLE MODEL ... --config FILE`), reads the
trial's configuration from that file, and behaves as the landscape file named by
$TUNER_FAKE_LANDSCAPE says for it: JSON `{"default": BEHAVIOUR, "configs": {CONFIG_ID:
BEHAVIOUR}, "rules": [{"match": {CONFIG_KEY: VALUE, ...}, ...BEHAVIOUR}]}`: the behaviour of
the exact configuration (`config_id`) as it is, else the first matching rule over the default.
A behaviour has `ttft_s` and `itl_s` (the fake server's timetable), optionally
`itl_per_in_flight_s` (the gap grows by it per request in flight: a load model) and `fail`:

- `crash`: ready, then dies at its first request with a segfault line in its log;
- `not_ready`: never answers /health;
- `bad_argument`: exits at start with a ValueError naming the argument;
- `http500`: stays up and answers every request with an error (an engine whose core died);
- `answers: wrong`: serves, but its greedy answers (unstreamed requests: the quality gate's)
  differ from every correct server's;
- with `fail_starts: N`, only the first N starts of that configuration fail (a flaky node); the
  starts are counted in a file beside the landscape.

It serves /health, /version, /metrics (empty) and the fake OpenAI streaming endpoints.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import sys
import time
from pathlib import Path

import yaml
from aiohttp import web

from tuner.testing.fake_openai_server import FakeOpenAIServer, Script

LANDSCAPE_ENV = "TUNER_FAKE_LANDSCAPE"


def fake_vllm(folder: Path) -> Path:
    """An executable named `vllm` in `folder` that runs this stand-in as a module of the installed
    tuner (set it as engine.executable)."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "vllm"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} -m tuner.testing.fake_engine \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


def fake_engine_section(folder: Path, ready_timeout_s: float) -> dict:
    """A spec's `engine` section serving this stand-in as vLLM, its executable under
    folder/bin and its landscape read from folder/landscape.json."""
    return {"name": "vllm", "executable": str(fake_vllm(folder / "bin")),
            "ready_timeout_s": ready_timeout_s,
            "env": {LANDSCAPE_ENV: str(folder / "landscape.json")}}


def fake_model(folder: Path) -> Path:
    """A model directory with just the config.json tuner reads a shape from."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["GptOssForCausalLM"], "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_local_experts": 8, "num_experts_per_tok": 2,
        "vocab_size": 1000, "max_position_embeddings": 1024, "num_hidden_layers": 2,
        "hidden_size": 64, "head_dim": 16}))
    return folder


def config_id(config: dict) -> str:
    """A configuration file's identity in a landscape's `configs` (canonical JSON)."""
    return json.dumps(config, sort_keys=True)


def behaviour(landscape: dict, config: dict) -> dict:
    exact = landscape.get("configs", {}).get(config_id(config))
    if exact is not None:
        return dict(exact)
    for rule in landscape.get("rules", []):
        if all(config.get(k) == v for k, v in rule["match"].items()):
            return {**landscape.get("default", {}), **rule}
    return dict(landscape.get("default", {}))


def count_start(landscape_path: Path, config: dict) -> int:
    """This start's number (1, 2, ...) for this configuration, across processes."""
    counts = landscape_path.with_suffix(".starts.json")
    key = json.dumps(config, sort_keys=True)
    with open(landscape_path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        seen = json.loads(counts.read_text()) if counts.exists() else {}
        seen[key] = seen.get(key, 0) + 1
        counts.write_text(json.dumps(seen))
    return seen[key]


def main(argv: list[str]) -> None:
    # `vllm serve MODEL --k v ...` or `trtllm-serve MODEL --k v ...`: the flags and their values.
    args = {a: b for a, b in zip(argv, argv[1:], strict=False) if a.startswith("--")}
    config = yaml.safe_load(Path(args["--config"]).read_text()) or {}
    landscape_path = Path(os.environ[LANDSCAPE_ENV])
    act = behaviour(json.loads(landscape_path.read_text()), config)
    fail = act.get("fail")
    if fail and "fail_starts" in act and count_start(landscape_path, config) > act["fail_starts"]:
        fail = None
    print(f"fake engine: {json.dumps(config, sort_keys=True)} -> {fail or 'serves'}", flush=True)
    if fail == "bad_argument":
        print("ValueError: max-num-seqs is not supported by this fake engine", file=sys.stderr)
        sys.exit(1)
    if fail == "not_ready":
        time.sleep(3600)
    server = FakeOpenAIServer(Script(ttft_s=act.get("ttft_s", 0.0), itl_s=act.get("itl_s", 0.0),
                                     itl_per_in_flight_s=act.get("itl_per_in_flight_s", 0.0),
                                     fail="http500" if fail == "http500" else None,
                                     wrong=act.get("answers") == "wrong"))

    async def completions(request: web.Request) -> web.StreamResponse:
        if fail == "crash":
            print("!!!!!!! Segfault encountered !!!!!!!\n  File \"fake_moe.cpp\", line 42, in "
                  "fused_moe_impl", file=sys.stderr, flush=True)
            os._exit(139)
        return await server.completions(request)

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="")

    async def version(_: web.Request) -> web.Response:
        return web.json_response({"version": "0.0+fake"})

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text="")

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", completions)
    web.run_app(app, host=args["--host"], port=int(args["--port"]), print=None,
                access_log=None, handler_cancellation=True, shutdown_timeout=0.5)


if __name__ == "__main__":
    main(sys.argv)
