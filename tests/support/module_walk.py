"""The walks of a held fetch and a held produce, as they run: which modules of the two
subsystems that share a held request (proxy/connection/ and proxy/held/) the code goes through,
in order, from the request's bytes to its answer.

Run ``python -m tests.support.module_walk`` (in process against a scripted broker, virtual
time; a few seconds). Each walk is traced with ``sys.setprofile`` from the client's send to its
receive, every task included (the purgatory's clock and the watcher run in tasks of their own,
and belong to the held path); nothing else runs meanwhile. A step is a call into a module of
those two folders other than the caller's (a coroutine resumed is not a call); what they call
below them (primitives/, routing/, wire/, ...) is passed over. It prints, per walk, the steps,
the modules visited and the returns (entering a module already left before), then the same by
subsystem, where a return means the code went back to a subsystem it had left. It needs only
what every tree of the project since the in-process harness has, so ``--root`` walks an older
checkout the same way.

  held fetch     a consumer's long-poll on a partition with nothing new, held at once, woken by
                 records written behind the proxy's back (the watcher learns of them), answered
                 with them
  held produce   an acks=all produce whose answer the broker sends 10 ms later
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import trio
import trio.testing

__all__ = ["Walk", "main", "walks"]


@dataclass
class Walk:
    name: str
    modules: list[str]  # the module at each step (a change of module)

    @property
    def folders(self) -> list[str]:
        """The steps by subsystem: connection/ or held/ (held/fetch/ counts as held/)."""
        steps: list[str] = []
        for module in self.modules:
            folder = module.split("/", 1)[0] + "/"
            if not steps or steps[-1] != folder:
                steps.append(folder)
        return steps

    def summary(self) -> str:
        return (
            f"{self.name}: {len(self.modules)} steps in {len(set(self.modules))} modules, "
            f"{_returns(self.modules)} returns; by subsystem {len(self.folders)} steps, "
            f"{_returns(self.folders)} returns\n"
            f"  subsystems: {' > '.join(self.folders)}"
        )


def _returns(steps: list[str]) -> int:
    """How many steps enter a module (or folder) that was entered and left before."""
    seen: set[str] = set()
    returns = 0
    for step in steps:
        returns += step in seen
        seen.add(step)
    return returns


class _Tracer:
    """Records the module of every function called (see the module docstring); modules
    outside proxy/connection/ and proxy/held/ are stepped over, and so is a coroutine or
    generator resumed (its frame was entered before)."""

    def __init__(self, root: Path) -> None:
        self._prefixes = {
            str(root / "proxy" / part) + "/": part + "/" for part in ("connection", "held")
        }
        self._names: dict[str, str | None] = {}
        self._entered: set[FrameType] = set()  # kept alive while tracing: ids stay unique
        self.modules: list[str] = []

    def _module(self, frame: FrameType | None) -> str | None:
        if frame is None:
            return None
        filename = frame.f_code.co_filename
        name = self._names.get(filename, "")
        if name == "":
            name = None
            for prefix, label in self._prefixes.items():
                if filename.startswith(prefix):
                    name = label + filename[len(prefix) :].removesuffix(".py")
            self._names[filename] = name
        return name

    def __call__(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call" or frame in self._entered:
            return
        self._entered.add(frame)
        module = self._module(frame)
        if module is not None and (not self.modules or self.modules[-1] != module):
            self.modules.append(module)


async def _traced(root: Path, step: Callable[[], Awaitable[None]]) -> list[str]:
    tracer = _Tracer(root)
    sys.setprofile(tracer)
    try:
        await step()
    finally:
        sys.setprofile(None)
    return tracer.modules


async def _walk_both(root: Path) -> list[Walk]:
    from tests.support.inprocess import proxy_in_process
    from tests.support.scripted_broker import ScriptedBroker
    from wire.messages import FetchRequest, MetadataRequest, ProduceRequest
    from wire.messages.fetch_request import FetchPartition, FetchTopic
    from wire.messages.produce_request import PartitionProduceData, TopicProduceData

    def produce() -> ProduceRequest:
        data = [TopicProduceData(name="t", partition_data=[
            PartitionProduceData(index=0, records=_one_record())])]  # fmt: skip
        return ProduceRequest(acks=-1, timeout_ms=1000, topic_data=data)

    def fetch(offset: int) -> FetchRequest:
        wanted = FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
        return FetchRequest(max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, session_id=0,
                            session_epoch=-1,
                            topics=[FetchTopic(topic="t", partitions=[wanted])])  # fmt: skip

    broker = ScriptedBroker()
    broker.create_topic("t")
    walks = []
    async with proxy_in_process(broker) as proxy:
        consumer, producer = await proxy.client(), await proxy.client()
        for client in (consumer, producer):
            await client.send(MetadataRequest(topics=None), 12)
            await client.receive()
        await consumer.send(fetch(0), 12)  # the proxy learns the partition's end
        await consumer.receive()
        await producer.send(produce(), 9)  # the producer's connection is open and answered
        await producer.receive()
        await consumer.send(fetch(1), 12)
        await consumer.receive()

        async def held_fetch() -> None:
            await consumer.send(fetch(2), 12)
            await trio.sleep(0.1)  # held: nothing new at offset 2
            broker.append("t", 0, _one_record())  # another client of the cluster writes
            await consumer.receive()

        walks.append(Walk("held fetch", await _traced(root, held_fetch)))
        broker.produce_delay_s = 0.01

        async def held_produce() -> None:
            await producer.send(produce(), 9)
            await producer.receive()

        walks.append(Walk("held produce", await _traced(root, held_produce)))
    return walks


def _one_record() -> bytes:
    from tests.support.load_wire import record_batch

    return bytes(record_batch(1))


def walks(root: Path) -> list[Walk]:
    """Both walks, in the tree at ``root`` (its proxy/, wire/ and tests/ are imported)."""
    sys.path.insert(0, str(root))
    result: list[Walk] = trio.run(
        _walk_both, root, clock=trio.testing.MockClock(autojump_threshold=0)
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2],
                        help="the checkout to walk (default: this one)")  # fmt: skip
    parser.add_argument("--steps", action="store_true", help="print every step too")
    args = parser.parse_args()
    for walk in walks(args.root.resolve()):
        print(walk.summary())
        if args.steps:
            print("  modules: " + " > ".join(walk.modules))


if __name__ == "__main__":
    main()
