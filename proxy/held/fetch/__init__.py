# Strategy: a client fetch the proxy answers itself, from its plan to its answer's frame. The
# package re-exports nothing: importers name the module they use.
#
#   path.py             FetchPath: the proxy's fetch path, and a held fetch's answer loop
#   client.py           ClientFetches: one connection's fetches (ClientFetch, start, answer, finish)
#   decision.py         the one decision per fetch: answer now, hold, or fetch (pure)
#   ticket.py           FetchTicket: one client fetch on its way, the owner of its lease
#   planning.py         FetchPlanner: a fetch's arrival, its session applied and its decision
#   holding.py          FetchHolding: the one way into the fetch purgatory
#   delayed.py          DelayedFetch, the operation a held fetch waits as
#   refetch.py          UpstreamReads: a held fetch's upstream reads, shared when identical
#   own_reads.py        OwnReads: passthrough reads on the client's own connection and identity
#   ahead.py            reading ahead for an active consumer: its next fetch predicted, matched
#   read_ahead.py       ReadAheads: one connection's read-ahead sent, claimed, discarded
#   frames.py           a held fetch's answer as frame parts; the idle consumer's empty answer
#   answer.py           upstream fetches built from a session, client answers built from them
#   session.py          KIP-227 fetch sessions terminated at the proxy
#   repeat.py           an idle consumer's repeated fetch, recognised by its bytes
#   brokers.py          BrokerResources: per broker sessions, re-fetch channels and watcher
#   wanted.py           the partitions a watcher polls, until when, at which leader epoch
#   watcher.py          per broker, one Fetch long-poll over every held fetch's partitions
#   offset_watcher.py   the passthrough watcher: ListOffsets only, a change detector
"""Held fetches: the fetch path, a connection's fetches, sessions, reads and watchers."""
