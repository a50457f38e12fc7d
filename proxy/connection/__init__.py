# Strategy: everything one client connection is made of, from the listener that accepts it to
# the pumps that serve it. The package re-exports nothing: importers name the module they use,
# so importing one piece never drags in the others (and no cycle can hide behind __init__).
#
#   state.py          the sans-I/O Connection: owed responses, the slot decision, upstream matching
#   client.py         ClientConnection: its two pumps in one nursery, its upstream, how it ends
#   requests.py       RequestPump: read, pay for (KIP-72), plan and pass on each request
#   responses.py      ResponsePump: answer owed slots in order (held ones: proxy/held/holds.py)
#   handoff.py        Handoff: what the two pumps hand each other (wake-ups, bytes in processing)
#   upstream_link.py  UpstreamLink: the connection's own upstream connection, opened on need
#   client_auth.py    ClientAuthentication: when the cluster has accepted a passthrough client
#   api_versions.py   KnownApiVersions: ApiVersions answered from the cluster's last answer
#   records.py        the RequestRecord of one finished request, and a connection's Recorder
#   services.py       ConnectionServices, ConnectionSettings: what every connection shares
#   listeners.py      the listener service: bootstrap and per-broker listeners, accept loops, TLS
#   admission.py      ConnectionAdmission: connection quotas at accept (KIP-402, KIP-612)
#   drain.py          the shutdown switch that stops every connection reading new requests
"""Client connections: listeners, the sans-I/O connection state, and the pumps around it."""
