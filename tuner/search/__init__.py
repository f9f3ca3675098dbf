"""The search: a study made ready from its spec (`context`), the one bridge to Optuna (`bridge`),
the study loop (`loop`), one trial's serving path shared by trials and confirmations (`trial`),
confirmation (`confirm`), recovery after a crash (`recovery`), the quality gate's reference
answers and per-trial check (`quality_gate`), and the domain rules every other
package calls (`rules`: configuration key, budget, best level, winner).

May import tuner.serve, tuner.measure, tuner.store and tuner.spec; it reaches engines only
through the adapter interface. Nothing is imported here, so `tuner.search.rules` loads without
the serving path (the dashboard uses it).
"""
