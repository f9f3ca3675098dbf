"""Test doubles shipped for the tests and the benches: a fake engine server with a scripted
landscape (`fake_engine`, started as `python -m tuner.testing.fake_engine` where a trial would
start vLLM) and the fake OpenAI streaming server it serves with (`fake_openai_server`). They are
never used by the product's code path: no product package (cli, report, plan, search, verdict,
serve, measure, store, spec) may import tuner.testing (a contract in pyproject.toml). They
import only the standard library, aiohttp, yaml and each other."""
