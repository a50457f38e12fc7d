# Strategy: the keeper is its own process so that the broker dies with the proxy, however it dies.
"""The embedded broker: Tansu when no upstream is configured, alive as long as the proxy.

embedded_broker.py  starts the embedded broker and watches it
broker_keeper.py    `python -m proxy.broker.broker_keeper`: the broker's keeper
"""
