# Strategy: waiting happens in the proxy (DESIGN "The purgatory"). This package is the
# held-requests subsystem; the purgatory and the timing wheel it runs on are primitives beside
# it (proxy/purgatory.py, proxy/timer/). The package re-exports nothing.
"""Held fetches and produces: the service, its operations, sessions and partition knowledge.

service.py          HeldRequests: the service connections use for fetch and produce
delayed.py          DelayedFetch and DelayedProduce, the operations held
fetch_session.py    KIP-227 fetch sessions terminated at the proxy
fetch_answer.py     upstream fetches built from a session, client answers built from them
fetch_repeat.py     an idle consumer's repeated fetch, recognised by its bytes
partition_state.py  what the proxy knows of each partition's log end, and when it is stale
wanted.py           the partitions a watcher covers, each until a deadline plus a linger
watcher.py          per broker, one long-poll over every held fetch's partitions
offset_watcher.py   passthrough: the same by ListOffsets (the proxy never fetches records)
"""
