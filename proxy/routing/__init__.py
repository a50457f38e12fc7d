# Strategy: a port (or, in SNI mode, a host name) stands for a node; answers are rewritten to say
# so.
"""Routing: what clients are told about brokers, topics and versions, and where to send.

table.py        Routing: node id <-> proxy port, node id -> upstream address
directory.py    the broker directory: the addresses clients see
rewrite.py      per request: plan it, rewrite its answer
topic_names.py  topic ids to names, and the key a partition is known by
"""
