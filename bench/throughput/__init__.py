"""Forwarding throughput and latency: direct vs purgatory-proxy vs tansu proxy (``python -m
bench.throughput``; its options in __main__.py).

config.py               what a run measures: cells, rounds, loads, routes
runner.py               the cells, routes interleaved, and a saved run's results
routes.py               the broker plus one forwarding route, fresh per cell
load.py                 librdkafka load generators and the forwarder's CPU/RSS watcher
report.py               tables, chart and the docs/benchmarks.md section
tls.py                  the cost of TLS on both sides (``python -m bench.throughput.tls``)
profiling.py            py-spy under load (``python -m bench.throughput.profiling``)
reuseport_prototype.py  one proxy process vs two behind one port with SO_REUSEPORT (a prototype)
"""
