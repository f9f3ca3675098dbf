"""What a study is, as the user declares it: the study spec (model, engine, hardware, workload,
SLA, objective, budget, and its quality gate in `quality_spec`), the search space with its
feasibility rules, the catalogue of GPU types those rules are keyed by, YAML loading, and tuner's
error types.

The bottom layer: it imports no other tuner package (only `tuner` itself, for its data folder).
"""
