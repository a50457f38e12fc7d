"""Benchmarks. Never run as tests; each prints its numbers and records them in docs/benchmarks.md."""
