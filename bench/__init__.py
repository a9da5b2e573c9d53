"""Benchmarks: ``make bench`` runs ``python -m bench.run`` and writes JSON under ``bench/results/``.

Never collected as tests.
"""
