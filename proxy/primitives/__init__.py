# Strategy: each reads like its model (Kafka's timer and purgatory, KIP-72's pool, trio).
"""Primitives: trio building blocks that know nothing of a Kafka request.

timer/               the hierarchical timing wheel: O(1) add and cancel, clock-free
purgatory.py         Kafka's DelayedOperationPurgatory on trio
memory.py            the KIP-72 pool: one bytes limit, muting by parking
memory_growth.py     the pool's growth of held leases, and its overdraft
memory_sensors.py    the pool's depletion sensor and statistics
lease.py             leases of the pool: one holder, or shared by one answer's readers
wake_order.py        who the pool wakes next: random when tight, rounds by connection
framed.py            frames from a trio stream: prefix first, then the body
stream_writer.py     writes to a stream, deferred frames batched into one writev
stream_deadlines.py  the read and write deadlines armed while a stream waits
accepting.py         accept() that waits out a lack of descriptors or memory
descriptors.py       the descriptor limit and the connections it affords
gc_policy.py         the process's garbage-collector policy
"""
