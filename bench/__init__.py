"""The benches: scripts that measure tuner, its load generator and its engines' settings on this
machine, each run by hand from the repository's root as `python -m bench.NAME` (bench/README.md
says what each measures and what it found) and each with a `--smoke` run that the suite keeps
working (tests/test_benches.py). They import tuner as an installed package, their shared helpers
as `bench.tiny_vllm`, `bench.figures` and `bench.guidellm_client`, and the fake engine of their
smoke runs from tuner.testing; no product code imports them, and they are not in the wheel."""
