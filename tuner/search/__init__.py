"""The search: a study made ready from its spec (`context`), the one bridge to Optuna (`bridge`),
the study loop (`loop`), one trial's serving path shared by trials and confirmations (`trial`),
confirmation (`confirm`), recovery after a crash (`recovery`), the quality gate's reference
answers and per-trial check (`quality_gate`). The rules it acts on (best level, winner, cost,
the head-to-head's pick) are `tuner.verdict`'s, below it, which the reports read too.

May import tuner.serve, tuner.measure, tuner.store and tuner.spec; it reaches engines only
through the adapter interface.
"""
