"""Side by side with Kroxylicious and kafka-proxy, in front of Apache Kafka (``python -m
bench.peers``; its options in __main__.py).

config.py        what a run measures: the families, their sizes and rounds
families.py      how each family walks its rounds, cells and routes, recording rows
routes.py        one route (direct or a forwarder) in front of a running cluster
kroxylicious.py  Kroxylicious, resolved from Maven Central (java/: its pom and launcher)
kafka_proxy.py   kafka-proxy, found or built
load.py          the librdkafka families: throughput, per request, latency, TLS
memory.py        RSS idle and per 1,000 idle client connections
fanin.py         idle fan-in against Apache Kafka, counted by its own meters
stats.py         medians over rounds, ratios to the same round's direct
goals.py         the goals against a run
report.py        the tables of the section; plot.py its plots
profiling.py     where each forwarder's CPU goes (``python -m bench.peers.profiling``)
"""
