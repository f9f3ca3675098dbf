"""Where a server's start went, read from its log: each phase ends at its milestone's first
stamped line, to the second; ready is the health check tuner saw."""

from __future__ import annotations

import datetime as dt

from tuner.serve.start_phases import phases_line, start_phases

# A TP2 vLLM CPU server's log, cut to its milestones (the demo, 2026-12-07).
LOG = """W1207 14:27:33.319000 9938 torch/_library/triton.py:53] Triton not available
(APIServer pid=9938) INFO 12-07 14:27:33 [api_utils.py:347] vLLM API server version 0.32.0
(EngineCore pid=9984) INFO 12-07 14:27:39 [core.py:133] Initializing a V1 LLM engine (v0.32.0)
(Worker_TP0 pid=9995) INFO 12-07 14:27:47 [parallel_state.py:1] world_size=2 rank=0
(Worker_TP0 pid=9995) INFO 12-07 14:27:48 [default_loader.py:501] Loading weights took 0.00 s
(EngineCore pid=9984) INFO 12-07 14:27:49 [core.py:402] init engine (profile, create kv cache, ...
(APIServer pid=9938) INFO 12-07 14:27:50 [entry.py:140] Starting vLLM server on http://127.0.0.1:41679
"""


def at(second: int) -> float:
    return dt.datetime(2026, 12, 7, 14, 27, second).timestamp()


def test_each_phase_ends_at_its_milestone_and_ready_at_the_health_check():
    phases = start_phases("vllm", LOG, started=at(25), ready=at(51) + 0.5)
    assert phases == [("process and imports", 8.0), ("engine core", 6.0), ("workers", 8.0),
                      ("model load", 1.0), ("KV cache and warm-up", 1.0), ("API server", 1.0),
                      ("ready", 1.5)]
    assert sum(s for _, s in phases) == at(51) + 0.5 - at(25)
    assert phases_line(phases).startswith("start: process and imports 8 s, engine core 6 s")


def test_a_milestone_the_log_lacks_is_left_out_and_an_unknown_engine_has_none():
    no_workers = "\n".join(ln for ln in LOG.splitlines() if "Worker" not in ln)
    names = [n for n, _ in start_phases("vllm", no_workers, at(25), at(51))]
    assert "workers" not in names and "model load" not in names and names[-1] == "ready"
    assert start_phases("trtllm", LOG, at(25), at(51)) == []


def test_a_data_parallel_servers_processes_are_named_by_rank():
    log = """(MainProcess pid=1) INFO 12-07 14:27:30 [serve.py:127] Defaulting api_server_count
(EngineCore_DP0 pid=2) INFO 12-07 14:27:36 [core.py:133] Initializing a V1 LLM engine
(Worker_DP0_EP0 pid=3) INFO 12-07 14:27:44 [parallel_state.py:1] world_size=2
"""
    names = [n for n, _ in start_phases("vllm", log, at(25), at(51))]
    assert names == ["process and imports", "engine core", "workers", "ready"]
