"""Purgatory enqueue rate: the timing wheel vs Kafka 0.8's design (``python -m bench.purgatory``;
its options in __main__.py).

workload.py  Kafka's TestPurgatoryPerformance workload: scenarios, rates, arrivals, latencies
baseline.py  Kafka 0.8.2's RequestPurgatory, copied faithfully
point.py     the wheel's harness, one point in a process of its own, the sweep
report.py    the docs/benchmarks.md section and its chart
"""
