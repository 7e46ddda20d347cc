"""Benchmark of the opal_dp release pipeline against a hand-written floor and two DP libraries.

``python -m benchmarks`` (``make bench``) generates the synthetic fortnight (cached per scale and
seed), runs the real Dagster pipeline end to end in a fresh subprocess per repeat, runs the
references on the same Parquet files, and writes ``results.json`` and ``RESULTS.md`` under ``--out``.
"""
