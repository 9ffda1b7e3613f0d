"""Benchmarks of the HTTP surface: ``scripts/bench`` runs :mod:`bench.turns`."""
