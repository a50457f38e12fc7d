"""Benchmarks: never run as tests; each prints its numbers and writes docs/benchmarks.md.

One benchmark per family, run as ``python -m bench.<family>``; a family of several modules is
a folder whose ``__main__.py`` is its command line.

fanin/         N idle long-polling consumers, direct vs through the proxy
throughput/    forwarding throughput and latency, the TLS cost, profiles of the request path
idle_cycle/    the proxy's CPU per idle long-poll answer against the floor of a trio server
peers/         side by side with Kroxylicious and kafka-proxy in front of Apache Kafka
purgatory/     the timing-wheel purgatory against Kafka 0.8's (TestPurgatoryPerformance)
fairness.py    the memory pool's wake order and the cost of its hot path
relay_floor.py consume 1 KiB: the proxy beside the floor of any forwarder
wire.py        framing, headers, codec and record batches
pipeline.py    ``purgatory-proxy report``: request-log lines per second
"""
