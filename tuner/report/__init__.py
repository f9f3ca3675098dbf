"""What a study found, for people and pipelines: the exports (engine config files, the versioned
JSON record and its schema, launch scripts, Kubernetes manifests), the terminal's tables, and the
dashboard's read models, all built from stored trials through the same functions.

May import tuner.search (its pure rules: which trial wins, which level a figure comes from),
tuner.serve (adapters rebuild a stored launch plan), tuner.measure, tuner.store and tuner.spec.
The dashboard's read models never reach the serving path (a contract in pyproject.toml).
"""
