# Strategy: everything one client connection is made of, from the listener that accepts it to
# the pumps that serve it. The package re-exports nothing: importers name the module they use,
# so importing one piece never drags in the others (and no cycle can hide behind __init__).
"""Client connections: listeners, the sans-I/O connection state, and the pumps around it.

state.py          the sans-I/O Connection: owed responses, upstream matching, close reasons
client.py         ClientConnection: the two thin I/O pumps around it
fetches.py        ClientFetches: the connection's side of its held fetches
fetch_ahead.py    reading ahead for an active consumer: its next fetch predicted and matched
own_reads.py      passthrough: a held fetch's reads on the client's own upstream connection
upstream_link.py  UpstreamLink: the client's own upstream connection, opened on need
client_auth.py    passthrough: what the cluster has confirmed of the client's authentication
api_versions.py   the cluster's ApiVersions answer per broker port, for reconnecting clients
records.py        the RequestRecord of one finished request
services.py       ConnectionServices: what every connection shares, wired by serve()
listeners.py      the listener service: bootstrap and per-broker listeners, accept loops, TLS
admission.py      connection limits at accept: total, per IP, creation rate (KIP-402, KIP-612)
drain.py          the shutdown switch that stops every connection reading new requests
"""
