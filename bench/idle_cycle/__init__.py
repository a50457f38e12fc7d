"""Idle long-poll cycle: the proxy's CPU per answer against the floor of a trio server
(``python -m bench.idle_cycle``; its options in __main__.py).

proxy_route.py  the proxy route: bench.fanin's proxy measurement as CPU µs per answer
floor.py        the two trio servers of the floor: two-pump (the proxy's shape) and bare
ab.py           this tree against another checkout, windows in the order A B B A
"""
