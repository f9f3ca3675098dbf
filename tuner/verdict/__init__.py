"""The verdict: pure rules over stored trials, shared by the search that acts on them and the
reports that show them. `rules` (configuration key, budget, best level, the one figure per
trial, winner, server spread, Pareto front), `cost` (price per device-hour, USD per million
tokens), `choose` (a configuration per price and target, across studies) and `finalists` (the
head-to-head's ratios, ties and pick).

May import tuner.measure's statistics, tuner.store's records and tuner.spec; never the serving
path, Optuna or the study loop, so reports and the dashboard read a verdict without them.
"""
