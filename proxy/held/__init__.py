# Strategy: waiting happens in the proxy (DESIGN "The purgatory"). This package is the
# held-requests subsystem; the purgatory and the timing wheel it runs on are primitives beside
# it (proxy/primitives/purgatory.py, proxy/primitives/timer/). The package re-exports nothing.
#
#   service.py          HeldRequests: the held path's one face, and a held fetch's answer
#   decision.py         the one decision per request: answer now, hold, or fetch; a produce's hold
#   ticket.py           FetchTicket: one client fetch on its way, the owner of its lease
#   planning.py         FetchPlanner: a fetch's arrival, its session applied and its decision
#   holding.py          FetchHolding: the one way into the fetch purgatory
#   refetch.py          UpstreamReads: a held fetch's upstream reads, shared when identical
#   produce.py          HeldProduces: produces held for their answer, and the fetches they wake
#   brokers.py          BrokerResources: per broker sessions, re-fetch channels and watcher
#   delayed.py          DelayedFetch and DelayedProduce, the operations held
#   fetch_session.py    KIP-227 fetch sessions terminated at the proxy
#   fetch_answer.py     upstream fetches built from a session, client answers built from them
#   fetch_repeat.py     an idle consumer's repeated fetch, recognised by its bytes
#   partition_state.py  what the proxy knows of each partition (ends, staleness, topic ids)
#   wanted.py           the partitions a watcher polls, until when, at which leader epoch
#   watcher.py          per broker, one Fetch long-poll over every held fetch's partitions
#   offset_watcher.py   the passthrough watcher: ListOffsets only, a change detector
"""Held fetches and produces: the service, its operations, sessions and partition knowledge."""
