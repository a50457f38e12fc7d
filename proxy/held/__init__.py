# Strategy: waiting happens in the proxy (DESIGN "The purgatory"). This package is the
# held-requests subsystem: everything a held request goes through between the plan that says
# "held" and its answer's bytes. The purgatory and the timing wheel it runs on are primitives
# beside it (proxy/primitives/purgatory.py, proxy/primitives/timer/). The package re-exports
# nothing; a client connection imports two of its modules: service.py and holds.py.
#
#   service.py          HeldRequests: the purgatories, the fetch path, produces; `connect`
#   holds.py            ConnectionHolds: one client connection's face (start, answer, abandon)
#   produce.py          held produces: their purgatory, a connection's holds, the fetches they wake
#   deadlines.py        the one place a held fetch's or produce's deadline is computed
#   client_upstream.py  ClientUpstream: what the held path asks of a client's own upstream link
#   partition_state.py  what the proxy knows of each partition (ends, staleness, topic ids)
#   fetch/              held fetches (its own index)
"""Held fetches and produces: the service, a connection's face, produces, fetches."""
