"""What a study found, for people and pipelines: the exports (engine config files, the versioned
JSON record and its schema, launch scripts, Kubernetes manifests), the terminal's tables, and the
dashboard's read models, all built from stored trials through the same functions.

May import tuner.verdict (which trial wins, its one figure, cost, the head-to-head's lines),
tuner.search's Optuna bridge only (the importance rating is Optuna's), tuner.serve (adapters
rebuild a stored launch plan), tuner.measure, tuner.store and tuner.spec.
The dashboard's read models never reach the serving path (a contract in pyproject.toml).
"""
