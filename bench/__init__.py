"""Benchmarks: never run as tests; each prints its numbers and writes docs/benchmarks.md."""
