# Strategy: attach py-spy (a sampling profiler reading the interpreter's memory from outside,
# so the proxy runs unmodified and at full speed) to the proxy process while librdkafka pushes
# one load through it, collect raw collapsed stacks, and fold them two ways: self samples
# (the frame on top) and cumulative samples (the frame anywhere in the stack), per function.
# The known suspects on the forwarding path are then priced by matching their source lines
# or callers in the same samples, so each gets a share of the proxy's on-CPU time.
#
# PROFILE_NOTES is the dated write-up of one such run that bench.throughput puts under
# its results; re-run `python -m bench.throughput.profiling` after the hot path changes.
"""Profile the proxy under produce and consume load with py-spy; print top frames and suspects."""

from __future__ import annotations

import argparse
import collections
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from bench.throughput.load import (
    ProcessWatch,
    consume_throughput,
    create_topic,
    produce_throughput,
)
from bench.throughput.routes import running_route

__all__ = ["PROFILE_NOTES", "Profile", "fold", "main"]

ROOT = Path(__file__).resolve().parents[2]
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


@dataclass(frozen=True)
class Profile:
    """Collapsed stacks: each a tuple of "func (file:line)" frames, outermost first."""

    stacks: dict[tuple[str, ...], int]

    @property
    def total(self) -> int:
        return sum(self.stacks.values())

    def share(self, predicate: Callable[[tuple[str, ...]], bool]) -> float:
        """Fraction of samples whose stack satisfies ``predicate``."""
        hits = sum(n for stack, n in self.stacks.items() if predicate(stack))
        return hits / self.total if self.total else 0.0


#: py-spy's idle filter does not recognise trio's blocking epoll_wait, so samples taken there
#: are waiting, not work; they are dropped (their share is reported as "idle").
_IDLE_TOP = "EpollIOManager.get_events (trio/_core/_io_epoll.py"


def parse_raw(text: str) -> tuple[Profile, int]:
    """Read py-spy's ``--format raw`` output (one "f1;f2;...;fn COUNT" line per stack).

    Returns:
        The on-CPU samples, and how many samples were idle in epoll_wait.
    """
    stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
    idle = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        frames, _, count = line.rpartition(" ")
        stack = tuple(frames.split(";"))
        if _IDLE_TOP in stack[-1]:
            idle += int(count)
        else:
            stacks[stack] += int(count)
    return Profile(dict(stacks)), idle


def _function(frame: str) -> str:
    """ "func (path/file.py:123)" -> "func (path/file.py)": samples of one function fold."""
    found = _FRAME.match(frame)
    return f"{found['func']} ({found['file']})" if found else frame


def fold(profile: Profile) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(self, cumulative) samples per function, largest first."""
    own: collections.Counter[str] = collections.Counter()
    cumulative: collections.Counter[str] = collections.Counter()
    for stack, n in profile.stacks.items():
        own[_function(stack[-1])] += n
        for function in {_function(frame) for frame in stack}:
            cumulative[function] += n
    return own.most_common(), cumulative.most_common()


#: The connection's response pump and its reports.
_RESPONSES = "proxy/connection/responses.py"
_RECORDS = "proxy/connection/records.py"


def _line_of(path: str, needle: str) -> int:
    """1-based number of the first line of ``path`` (under the repo) containing ``needle``."""
    for number, text in enumerate((ROOT / path).read_text().splitlines(), start=1):
        if needle in text:
            return number
    raise LookupError(f"{needle!r} not found in {path}; update the suspect list")


def _top_is(path: str, needle: str) -> Callable[[tuple[str, ...]], bool]:
    """The sample's top Python frame is the line of ``path`` containing ``needle``."""
    suffix = f"({path}:{_line_of(path, needle)})"
    return lambda stack: stack[-1].endswith(suffix)


def _anywhere(*fragments: str) -> Callable[[tuple[str, ...]], bool]:
    """Every fragment appears, in this order, somewhere along the stack."""

    def predicate(stack: tuple[str, ...]) -> bool:
        position = 0
        for fragment in fragments:
            while position < len(stack) and fragment not in stack[position]:
                position += 1
            if position == len(stack):
                return False
            position += 1
        return True

    return predicate


def suspects() -> list[tuple[str, Callable[[tuple[str, ...]], bool]]]:
    """The forwarding-path costs the issue names, as sample predicates."""
    return [
        (
            "framed: all frame reading (read ahead, bodies via readv, decoder)",
            lambda stack: any(
                "next_size (proxy/primitives/framed.py" in f
                or "finish (proxy/primitives/framed.py" in f
                for f in stack
            ),
        ),
        (
            "framed: allocating and filling the frame buffer (wire FrameDecoder)",
            _anywhere("(proxy/primitives/framed.py", "(wire/framing.py"),
        ),
        (
            "client: copy of a rewritten response (size prefix + new body)",
            _top_is(_RESPONSES, "size_prefix(len(rewritten)) + rewritten"),
        ),
        (
            "writes, both directions (StreamWriter: write / writev, deferred batches)",
            _anywhere("StreamWriter."),
        ),
        (
            "  of which: responses to the client (response pump)",
            _anywhere(f"run ({_RESPONSES}", "StreamWriter."),
        ),
        (
            "  of which: the syscall itself (top frame on the os.write/writev line)",
            lambda stack: "StreamWriter." in stack[-1],
        ),
        (
            "reads: the syscall itself (top frame on the os.read/readv line)",
            lambda stack: "FrameReader._receive" in stack[-1],
        ),
        (
            "trio's I/O manager (epoll registration and wait)",
            lambda stack: "trio/_core/_io_epoll.py" in stack[-1],
        ),
        (
            "plan_request -> Produce read for acks (wire.produce_summary; whole decode before)",
            lambda stack: (
                _anywhere("plan_request (proxy/routing/rewrite.py", "(wire/codec.py")(stack)
                or _anywhere("plan_request (proxy/routing/rewrite.py", "(wire/produce_summary.py")(
                    stack
                )
            ),
        ),
        ("plan_request: all of it", _anywhere("plan_request (proxy/routing/rewrite.py")),
        (
            "rewrite_response (Produce v10+ walked, decoded only with KIP-951 tags; Fetch v16+)",
            _anywhere("rewrite_response (proxy/routing/rewrite.py"),
        ),
        (
            "  of which: the full decode",
            _anywhere("rewrite_response (proxy/routing/rewrite.py", "(wire/codec.py"),
        ),
        (
            "timeouts and cancel scopes",
            lambda stack: any(
                "(trio/_timeouts.py" in f or "CancelScope.__e" in f or "CancelScope._close" in f
                for f in stack
            ),
        ),
        ("memory channel of response slots", _anywhere("(trio/_channel.py")),
        ("pool: try_allocate + allocate", _anywhere("allocate (proxy/primitives/memory.py")),
        (
            "observer: report / request_done (metrics, request log)",
            _anywhere(f"report ({_RECORDS}"),
        ),
        ("peek_error_code (response error code for metrics)", _anywhere("peek_error_code (")),
        (
            "trio scheduler itself (top frame in trio/_core)",
            lambda stack: "trio/_core/" in stack[-1],
        ),
    ]


def report(title: str, profile: Profile, idle: int, cpu_s: float, top: int = 12) -> str:
    """Markdown: the top self and cumulative functions and each suspect's share."""
    own, cumulative = fold(profile)
    total = profile.total or 1
    lines = [
        f"#### {title}: proxy CPU {cpu_s:.2f} s; {profile.total} on-CPU samples "
        f"(+{idle} idle in epoll_wait, dropped)",
        "",
    ]
    lines += ["| self % | function | | cumulative % | function |", "|---:|---|---|---:|---|"]
    for (f_own, n_own), (f_cum, n_cum) in zip(
        own[:top], _proxy_frames(cumulative)[:top], strict=False
    ):
        lines.append(
            f"| {100 * n_own / total:.1f} | `{f_own}` | | {100 * n_cum / total:.1f} | `{f_cum}` |"
        )
    lines += ["", "| suspect | share of on-CPU samples |", "|---|---:|"]
    for label, predicate in suspects():
        lines.append(f"| {label} | {100 * profile.share(predicate):.1f} % |")
    return "\n".join(lines)


def _proxy_frames(cumulative: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """Cumulative list without the always-100 % outer frames (runpy, cli, trio.run)."""
    skip = (
        "<frozen runpy>",
        "proxy/__main__.py",
        "main (proxy/cli.py",
        "run (trio/_core/_run.py",
        "unrolled_run (trio/_core",
    )
    return [(f, n) for f, n in cumulative if not any(s in f for s in skip)]


def _record(
    scenario: str, record_bytes: int, count: int, out: Path, rate_hz: int
) -> tuple[Profile, int, float]:
    """Run one load through a fresh proxy while py-spy samples it."""
    raw = out / f"profile-{scenario}.txt"
    with running_route("purgatory-proxy") as route:
        assert route.forwarder_pid is not None
        topic = create_topic(route.bootstrap)
        if scenario.startswith("consume"):
            produce_throughput(route.bootstrap, topic, record_bytes, count)
        spy = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "py-spy"),
                "record",
                "--format",
                "raw",
                "--rate",
                str(rate_hz),
                "--output",
                str(raw),
                "--pid",
                str(route.forwarder_pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # py-spy attaches
        watch = ProcessWatch(route.forwarder_pid)
        watch.start()
        if scenario.startswith("consume"):
            consume_throughput(route.bootstrap, topic, count)
        else:
            per_request = 1 if scenario.endswith("per-request") else None
            produce_throughput(route.bootstrap, topic, record_bytes, count, per_request)
        cpu_s = watch.stop()
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=30)
    profile, idle = parse_raw(raw.read_text())
    return profile, idle, cpu_s


SCENARIOS = {
    "produce-1KiB": (1024, 600_000),
    "produce-100B": (100, 2_000_000),
    "consume-1KiB": (1024, 600_000),
    # One record per Produce request: the per-request cost, the floor of the latency path.
    "produce-100B-1-per-request": (100, 60_000),
}


def suspect_table(runs: dict[str, tuple[Profile, int, float]]) -> str:
    """Markdown: every suspect's share of on-CPU samples, one column per scenario."""
    names = list(runs)
    lines = [
        "| share of proxy on-CPU samples | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for label, predicate in suspects():
        shares = [f"{100 * runs[n][0].share(predicate):.1f} %" for n in names]
        lines.append(f"| {label} | " + " | ".join(shares) + " |")
    lines.append("| proxy CPU s during the load (py-spy attached) | "
                 + " | ".join(f"{runs[n][2]:.2f}" for n in names) + " |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("/tmp"), help="where raw stacks go")
    parser.add_argument("--rate", type=int, default=1000, help="py-spy samples per second")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply record counts")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    runs = {}
    for scenario, (record_bytes, count) in SCENARIOS.items():
        records = int(count * args.scale)
        runs[scenario] = _record(scenario, record_bytes, records, args.out, args.rate)
        print(report(f"{scenario} x {records:,}", *runs[scenario]))
        print()
    print(suspect_table(runs))


PROFILE_NOTES = """### Profile of the proxy under load (py-spy)

_2026-11-22, proxy at commit 508a6c3, py-spy 0.4.3 attached to the proxy PID at 1000 Hz,
`python -m bench.throughput.profiling`. py-spy does not see trio's blocking `epoll_wait` as
idle, so samples on top of `EpollIOManager.get_events` are dropped and shares below are of the
on-CPU samples. Scenarios: produce 1 KiB x 600,000 and 100 B x 2,000,000 (linger 5 ms, so
~1 MB Produce requests), consume 1 KiB x 600,000, and 100 B x 60,000 with one record per
Produce request (`batch.num.messages=1`: the per-request path, no payload to speak of)._

Top frames, 1 record per request (19,414 samples, 239 µs of proxy CPU per request):

| self % | function | cumulative % | function |
|---:|---|---:|---|
| 24.7 | `_nonblocking_helper` (send/recv syscall) | 84.9 | `ClientConnection._guard` |
| 8.3 | `unrolled_run` (trio's scheduler loop) | 50.0 | `_pump_requests` |
| 3.0 | `_GeneratorContextManager.__exit__` (scopes) | 34.7 | `_pump_responses` |
| 3.0 | `Runner.reschedule` | 23.9 | `SocketStream.send_all` |
| 2.7 | `ClientConnection._pump_requests` | 18.5 | `receive_exactly` |
| 2.7 | `SocketStream.send_all` | 12.9 | `ClientConnection._read_size` |
| 2.4 | `_decode <ProduceResponse v10>` (rewrite_response) | 10.6 | `_next_owed_response` |
| 2.4 | `_decode <ProduceRequest v10>` (plan_request) | 10.4 | `ClientConnection._read_body` |

Top frames, produce 1 KiB (1,427 samples): self `_nonblocking_helper` 54.7 %, `unrolled_run`
7.1 %, `_pump_requests` 4.2 % (the `size.to_bytes(4) + body` line), `Runner.reschedule` 2.5 %;
cumulative `_pump_requests` 65.5 %, `send_all` 52.8 %, `_pump_responses` 19.9 %,
`receive_exactly` 15.1 %. Consume 1 KiB (765 samples): self `_nonblocking_helper` 42.9 %,
`receive_exactly` 17.1 % (the join), `_pump_responses` 11.0 % (the response concatenation);
cumulative `_pump_responses` 80.1 %, `receive_exactly` 34.9 %, `send_all` 34.4 %.

The suspects, priced:

| share of proxy on-CPU samples | produce 1 KiB | produce 100 B | consume 1 KiB | 1 record/request |
|---|---:|---:|---:|---:|
| `receive_exactly`: `b"".join` of a body that arrived in pieces | 0.1 % | 0.0 % | 17.0 % | 0.0 % |
| `receive_exactly`, all of it (receive_some included) | 15.1 % | 12.9 % | 34.9 % | 18.5 % |
| `size.to_bytes(4) + body` (request copy) | 3.5 % | 4.2 % | 0.1 % | 0.5 % |
| `len(body).to_bytes(4) + body` (response copy) | 0.2 % | 0.0 % | 10.1 % | 0.5 % |
| `send_all`, both directions | 52.8 % | 55.3 % | 34.4 % | 23.9 % |
| ... of which the syscall itself | 45.1 % | 50.0 % | 29.2 % | 16.6 % |
| ... of which one `send_all` per response | 6.3 % | 5.7 % | 32.9 % | 10.3 % |
| `plan_request` decoding the whole Produce for `acks` | 0.6 % | 1.9 % | 0.0 % | 3.4 % |
| `plan_request`, all of it | 2.6 % | 4.9 % | 0.8 % | 7.2 % |
| `rewrite_response`: Produce v10+ / Fetch v16+ decoded | 2.3 % | 3.4 % | 2.7 % | 6.1 % |
| per-read timeouts (`move_on_after`/`move_on_at`, cancel scopes) | 3.4 % | 4.2 % | 3.7 % | 12.7 % |
| memory channel of response slots | 0.7 % | 1.5 % | 0.8 % | 2.6 % |
| memory pool `try_allocate` + `allocate` | 0.1 % | 0.4 % | 0.5 % | 0.6 % |
| observer (`_report`, metrics, request log) | 1.9 % | 0.0 % | 0.8 % | 4.0 % |
| trio scheduler (top frame in `trio/_core`) | 18.4 % | 12.5 % | 12.7 % | 23.6 % |

What dominates, and what would help (in order of measured gain; none applied here, proxy/ is
being changed by another task):

1. **Batched traffic is syscall-bound, not Python-bound.** With ~1 MB requests, 45-50 % of the
   proxy's CPU is the kernel copying bytes in `send` (plus most of `receive_some`), and the
   proxy needs only ~1.2 CPU s per GiB (tansu proxy: ~4.8; Kroxylicious' anchor: ~27). The
   throughput gap to direct (0.7-0.85x) is the proxy's CPU and its extra loopback hops taken
   from the client and broker on 2 shared cores, not Python per-byte work.
2. **Consume path: the two copies are ~27 % of the proxy's CPU.** Fetch responses arrive in
   pieces, so `receive_exactly` joins them (17 %) and `_pump_responses` copies the body again
   to prepend the size (10 %). Fix: read the body into one pool-sized `bytearray` with
   `recv_into` on a `memoryview` (no join), and write size + body with one `sendmsg([size,
   body])` (no concatenation, still one syscall). On produce the request concat is 3.5-4 %.
3. **Per request the floor is the machine's syscalls and trio's scheduling.** One record per
   request costs 261 µs of proxy CPU per request without the profiler (tansu proxy, Rust:
   183 µs), and direct/proxy/tansu proxy reach 7,322 / 2,538 / 2,228 requests/s. This VM
   (Firecracker) makes loopback TCP expensive: a 100-byte send+recv pair costs ~20-35 µs in a
   plain Python loop, and forwarding needs two pairs plus epoll per request. Trio's own loop
   is another ~24 %. Still in Python's reach: per-read `move_on_after` scopes (12.7 %; keep
   one connection-level deadline scope and move its `deadline` instead of creating a scope per
   frame), batching responses (10.3 % in one `send_all` per response: drain every ready slot and
   write them with one `sendmsg`), and the two full decodes below (9.5 % together).
4. **`rewrite_response` decodes every Produce v10+ response** (6.1 % per request) only to look
   for KIP-951 `node_endpoints`, which brokers attach only to a leader-change error
   (NOT_LEADER_OR_FOLLOWER; FENCED_LEADER_EPOCH too for Fetch): peek the partition error
   codes first and decode only then.
5. **`plan_request` decodes the whole Produce request to read `acks`** (3.4 % per request,
   ≤ 2 % batched): `acks` sits right after the (compact) nullable `transactional_id`, so
   reading one length and two bytes gives it without touching the records.
6. **The pool is not a cost any more:** `try_allocate` runs first and the awaiting `allocate`
   (a trio checkpoint) is only taken when memory is short, 0.1-0.6 %. The observer is 0-4 %.

#### After commit bcbc842 (items 2 and 3's cancel scopes fixed)

Frames are now read with `recv_into` straight into one `bytearray` that already holds the size
prefix and written on unchanged (no join, no re-prefix); one cancel scope per connection moves
its deadline instead of a scope per read. Proxy CPU seconds for the same loads, runs
interleaved before/after/before/after with py-spy attached:

| load | before (508a6c3 path) | after (bcbc842) |
|---|---:|---:|
| produce 1 KiB x 200,000 | 0.78 / 0.69 s | 0.72 / 0.63 s |
| produce 100 B x 500,000 | 0.35 / 0.32 s | 0.33 / 0.28 s |
| consume 1 KiB x 600,000 | 0.54 / 0.55 s | 0.40 / 0.42 s |
| 100 B x 60,000, one record per request | 14.77 / 13.64 s | 12.53 / 12.96 s |

On the consume path the top self frames went from syscalls 40.6 %, `receive_exactly` 18.7 %
(the join), `_pump_responses` 10.5 % (the copy) to syscalls 55.1 %, `receive_frame` 10.4 %
(allocating the frame buffer); with one record per request the cancel scopes went from 12.9 %
to 0.0 %. Still open: one `send_all` per response, and items 4 and 5.
"""


if __name__ == "__main__":
    main()
