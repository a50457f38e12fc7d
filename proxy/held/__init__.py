# Strategy: waiting happens in the proxy (DESIGN "The purgatory"). This package is the
# held-requests subsystem; the purgatory and the timing wheel it runs on are primitives beside
# it (proxy/purgatory.py, proxy/timer/). The package re-exports nothing.
#
#   service.py          HeldRequests: the service connections use for fetch and produce
#   delayed.py          DelayedFetch and DelayedProduce, the operations held
#   fetch_session.py    KIP-227 fetch sessions terminated at the proxy
#   fetch_answer.py     upstream fetches built from a session, client answers built from them
#   partition_state.py  what the proxy knows of each partition (ends, staleness, topic ids)
#   watcher.py          per broker, one long-poll over every held fetch's partitions
"""Held fetches and produces: the service, its operations, sessions and partition knowledge."""
