"""The training-data experiment: datasets, sample sources, a multi-process data loader,
a (simulated or real) accelerator, the epoch loop, the report, and a latency proxy.

``bench/run_train_bench.py`` runs it against every contender; these modules hold the
parts that do not depend on which contender is being measured.
"""
