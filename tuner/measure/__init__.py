"""Measuring a live server: one streamed request (`client`), the load generator over it and
its one SSE parser, prompt sources and prompt files, a level's figures and their confidence,
the statistics behind them, the engine's own /metrics read around and during each level, and
the quality gate's answers, comparisons and task checks (`quality`, `quality_tasks`).

May import tuner.store (the records it produces) and tuner.spec; it knows nothing of how the
server was started (tuner.serve sits beside it, and neither imports the other) or of Optuna.
"""
