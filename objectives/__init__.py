"""Measurements: workloads, the load client, metrics and the objective vector of a trial.

See docs/measurement.md for the definitions and the benchmark figures.
"""
