"""Fan-in: N idle long-polling consumers, direct vs through purgatory-proxy (``python -m
bench.fanin``; its options in __main__.py).

config.py     what a run measures (Config), what it found (Run), the proxy's settings for N
runner.py     the measurements, N by N, each in a fresh stack
measure.py    one measurement: N consumers on one route, counted, timed and weighed
stack.py      the processes behind it: broker, counting relays, proxy
relay.py      the counting relay in front of the broker (``python -m bench.fanin.relay``)
consumer.py   the idle consumers: KIP-227 fetch sessions, delivery probes
client.py     the minimal protocol-level Kafka client they are written with
selfcheck.py  the consumers' pure logic checked before every run
report.py     the docs/benchmarks.md section
"""
