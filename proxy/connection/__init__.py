# Strategy: everything one client connection is made of, from the listener that accepts it to
# the pumps that serve it. The package re-exports nothing: importers name the module they use,
# so importing one piece never drags in the others (and no cycle can hide behind __init__).
#
#   state.py      the sans-I/O Connection: owed responses, upstream matching, close reasons
#   client.py     ClientConnection: the two thin I/O pumps around it
#   services.py   ConnectionServices: what every connection shares, wired by serve()
#   records.py    the RequestRecord of one finished request
#   listeners.py  the listener service: bootstrap and per-broker listeners, accept loops, TLS
#   drain.py      the shutdown switch that stops every connection reading new requests
"""Client connections: listeners, the sans-I/O connection state, and the pumps around it."""
