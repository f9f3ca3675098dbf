"""Serving one configuration: engine adapters (one per engine, turning canonical parameters into
a launch plan: argv, environment, files), the launcher (process group, log, readiness,
teardown), failure classification from a server's log, this node's hardware inventory and NVML,
device slots for parallel trials, and the tiny model a CPU node serves.

May import tuner.store and tuner.spec; it knows nothing of Optuna, the study loop or the load
generator (tuner.measure sits beside it, and neither imports the other).
"""
