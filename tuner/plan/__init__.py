"""Planning without launching: the performance model (`perfmodel`, pure computation over data
files), `tuner plan` (predictions with their bands for every configuration, the predicted front,
the top candidates), refits to a study (`study_fit`), dry runs, and a warm start handed to the
search as a list of configurations.

May import tuner.search (to prepare a study and hand it a warm start), tuner.serve (adapters,
planned inventories), tuner.store and tuner.spec. Its predictions are stored by the caller,
tagged as predictions.
"""
