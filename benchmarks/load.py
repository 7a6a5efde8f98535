"""Client load, run in a process of its own: `python -m benchmarks.load OP JSON` prints one JSON result.

Every operation creates the topics it uses, bounds each wait by `params["timeout"]` seconds,
and raises on any delivery or fetch error (the harness records that as n/a with the message).
"""

from __future__ import annotations

import functools
import json
import math
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from benchmarks import raw_fetch
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.frame import encode_request, encode_response
from pybroker.protocol.messages import FetchRequest, FetchResponse
from pybroker.protocol.messages.request_header import RequestHeader

Params = dict[str, Any]
Result = dict[str, float]
PAYLOAD = b"x" * 100
MIB_BYTES = 1 << 20
BATCHING = {"linger.ms": 5, "batch.size": 1048576, "acks": 1}
#: W2's second pass: librdkafka's fetch.max.bytes at its max.partition.fetch.bytes default (1 MiB).
EQUAL_RESPONSE_BYTES = 1 << 20
#: W2's raw reads of each topic (benchmarks/raw_fetch.py): a few passes, since one stall of the shared machine
#: can make up most of a pass that takes a few milliseconds.
RAW_PASSES = 3
#: W2's consumers: librdkafka's largest queued.min.messages, so that prefetching never waits on a full queue.
QUEUED_MIN_MESSAGES = 10_000_000


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, `q` in 0..100."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _raise_error(err: KafkaError | None, _msg: Message) -> None:
    if err is not None:
        raise KafkaException(err)


def producer(bootstrap: str, **config: Any) -> Producer:
    """A producer that only reports failed deliveries, which raise from poll()/flush()."""
    return Producer({"bootstrap.servers": bootstrap, "on_delivery": _raise_error,
                     "delivery.report.only.error": True, **config})


def create_topic(bootstrap: str, topic: str, partitions: int, timeout: float, replicas: int = 1,
                 config: dict[str, str] | None = None, client: dict[str, str] | None = None) -> None:
    """Create `topic` and wait until every partition has a leader and all `replicas` in sync.
    `client`: librdkafka security settings (security.protocol, sasl.*, ssl.*), as for every op."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **(client or {})})
    deadline = time.monotonic() + timeout
    while len(admin.list_topics(timeout=timeout).brokers) < replicas:  # a cluster's brokers register one by one
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {replicas} brokers registered after {timeout:.0f} s")
        time.sleep(0.1)
    admin.create_topics([NewTopic(topic, partitions, replicas, config=config or {})])[topic].result(timeout)
    while True:
        found = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
        if found and found.error is None and len(found.partitions) == partitions \
                and all(p.leader >= 0 and len(p.isrs) == replicas for p in found.partitions.values()):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic} has no leaders or full ISR after {timeout:.0f} s")
        time.sleep(0.05)


def produce_all(client: Producer, topic: str, count: int, partitions: int, payload: bytes, timeout: float) -> float:
    """Produce `count` messages round-robin over `partitions`, flush, return the seconds taken."""
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                client.produce(topic, payload, partition=i % partitions)
                break
            except BufferError:
                client.poll(0.001)
    if client.flush(timeout):
        raise RuntimeError(f"messages still undelivered after {timeout:.0f} s")
    return time.perf_counter() - start


@dataclass
class ConsumeTimes:
    """W2's clocks: `steady` msgs/s from the first batch received to the last (librdkafka's start-up left
    out), `total` msgs/s from assign() to the last message, `first_s` from assign() to the first message."""

    steady: float
    total: float
    first_s: float
    fetch_requests: int = 0
    fetch_kib: float = 0.0  # received bytes per Fetch request, KiB


def consume_all(bootstrap: str, topic: str, count: int, partitions: int, timeout: float,
                client: dict[str, Any] | None = None) -> ConsumeTimes:
    """Read `count` messages from the beginning of every partition (assign, no group join).

    `fetch.queue.backoff.ms=0` stops librdkafka pausing fetches for a second whenever its local queue is
    full, which otherwise caps both brokers at the same client-side rate. `queued.min.messages` raised: at
    its default (100,000 per partition) librdkafka leaves the partitions with data out of its fetches while
    their queues are full, so that a fetch may name only partitions already read to the end, and either
    broker then holds it for fetch.wait.max.ms (500 ms), as Kafka does; with 8 partitions such waits put
    each run at random on one of a few rates (about 0.66, 0.95 or 1.7 M msgs/s here, on both brokers).
    """
    stats = _Stats()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "benchmarks", "enable.auto.commit": False,
                         "fetch.queue.backoff.ms": 0, "queued.min.messages": QUEUED_MIN_MESSAGES,
                         "statistics.interval.ms": 200, "stats_cb": stats, **(client or {})})
    assigned = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = first = 0
    deadline = assigned + timeout
    start = 0.0
    while got < count:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"consumed {got} of {count} messages in {timeout:.0f} s")
        for message in consumer.consume(num_messages=10000, timeout=1.0):
            if message.error():
                raise KafkaException(message.error())
            got += 1
        if not first and got:
            first, start = got, time.perf_counter()
    end = time.perf_counter()
    fetches, received = stats.fetches(consumer, timeout)
    consumer.close()
    return ConsumeTimes(steady=(got - first) / max(end - start, 1e-9),  # 0 if one batch held everything
                        total=got / (end - assigned), first_s=start - assigned, fetch_requests=fetches,
                        fetch_kib=received / max(fetches, 1) / 1024)


def cpu_seconds(pid: int) -> float:
    """CPU seconds the live threads of process `pid` have run, to the nanosecond (each one's run time from
    /proc/<pid>/task/<tid>/schedstat). utime + stime come in 10 ms ticks, rounded per thread: W1's 1M lz4 messages
    cost Tansu about 7, so a tick moved its CPU per message by about 15%. A thread that exits within a window
    takes its time with it; neither broker's threads do while they work (a Tokio blocking thread exits after 10 s
    idle, longer than W1's and W2's windows)."""
    total_ns = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total_ns += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # the thread exited while being read
            continue
    return total_ns / 1e9


def cpu_split(pid: int) -> tuple[float, float]:
    """(utime, stime) of process `pid` in seconds: its own code, and the kernel working for it."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def warmup(p: Params) -> Result:
    """Touch the produce, fetch and coordinator paths once, outside any measurement."""
    create_topic(p["bootstrap"], "warmup", 1, p["timeout"])
    produce_all(producer(p["bootstrap"], **BATCHING), "warmup", 1000, 1, PAYLOAD, p["timeout"])
    consume_all(p["bootstrap"], "warmup", 1000, 1, p["timeout"])
    return {}


def produce_consume(p: Params) -> Result:
    """W1 then W2: produce `messages` with BATCHING and `codec`, then consume them all from the beginning
    (over the security settings in `client`, if any: W9); with the broker's `pid`, also its CPU per message
    in each phase."""
    security = p.get("client", {})
    create_topic(p["bootstrap"], p["topic"], p["partitions"], p["timeout"], client=security)
    client = producer(p["bootstrap"], **BATCHING, **{"compression.type": p["codec"]}, **security)
    pid = p.get("pid")
    cpu_start = cpu_seconds(pid) if pid else 0.0
    produced = produce_all(client, p["topic"], p["messages"], p["partitions"], PAYLOAD, p["timeout"])
    cpu_produced = cpu_seconds(pid) if pid else 0.0
    consumed = consume_all(p["bootstrap"], p["topic"], p["messages"], p["partitions"], p["timeout"], security)
    cpu_consumed = cpu_seconds(pid) if pid else 0.0
    extra: Result = {}
    if p.get("bounded"):
        # Again with every response held to 1 MiB: Tansu does not apply max.partition.fetch.bytes (1 MiB)
        # but does apply fetch.max.bytes, so here both answer lz4 data in responses of the same size
        # (uncompressed, Tansu's still carry two 1 MiB batches; see the README).
        bounded = consume_all(p["bootstrap"], p["topic"], p["messages"], p["partitions"], p["timeout"],
                              {**security, "fetch.max.bytes": EQUAL_RESPONSE_BYTES})
        extra = {"consume_bounded": bounded.steady, "consume_bounded_total": bounded.total,
                 "fetch_kib_bounded": bounded.fetch_kib}
        if not security:  # the raw reader speaks PLAINTEXT only
            raws = [raw_fetch.read_topic(p["bootstrap"], p["topic"], p["partitions"], max_bytes=EQUAL_RESPONSE_BYTES,
                                         partition_max_bytes=EQUAL_RESPONSE_BYTES, timeout=p["timeout"])
                    for _ in range(RAW_PASSES)]
            extra["raw_fetch_mib_s"] = percentile([raw.bytes / MIB_BYTES / max(raw.seconds, 1e-9) for raw in raws], 50)
            extra["raw_fetch_ms"] = percentile([trip for raw in raws for trip in raw.round_trips], 50) * 1000
    per_message = 1e6 / p["messages"]
    return {**extra, "produce": p["messages"] / produced, "consume": consumed.steady,
            "consume_total": consumed.total, "consume_first_s": consumed.first_s, "fetch_kib": consumed.fetch_kib,
            "fetches_per_s": consumed.fetch_requests / max(p["messages"] / max(consumed.total, 1e-9), 1e-9),
            "produce_cpu_us": (cpu_produced - cpu_start) * per_message,
            "consume_cpu_us": (cpu_consumed - cpu_produced) * per_message}


def scram_user(p: Params) -> Result:
    """Create SCRAM credentials `user`/`password` for both mechanisms (AlterUserScramCredentials)."""
    admin = AdminClient({"bootstrap.servers": p["bootstrap"]})
    upsertions: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(p["user"], ScramCredentialInfo(mechanism, p["iterations"]), p["password"].encode())
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
    for future in admin.alter_user_scram_credentials(upsertions).values():
        future.result(p["timeout"])
    return {}


def allow_acls(p: Params) -> Result:
    """W11 set-up: ALLOW everything for User:ANONYMOUS on topics prefixed `prefix`, every group and the
    cluster, and `others` literal ACLs for other principals and topics, so that each check looks through
    a realistic set (the broker has allow.everyone.if.no.acl.found=true only until these exist)."""
    anonymous = "User:ANONYMOUS"
    bindings = [AclBinding(ResourceType.TOPIC, p["prefix"], ResourcePatternType.PREFIXED, anonymous, "*",
                           AclOperation.ALL, AclPermissionType.ALLOW),
                AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, anonymous, "*",
                           AclOperation.ALL, AclPermissionType.ALLOW),
                AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, anonymous, "*",
                           AclOperation.ALL, AclPermissionType.ALLOW)]
    bindings += [AclBinding(ResourceType.TOPIC, f"other-{i}", ResourcePatternType.LITERAL, f"User:user-{i}", "*",
                            AclOperation.WRITE, AclPermissionType.ALLOW) for i in range(p["others"])]
    admin = AdminClient({"bootstrap.servers": p["bootstrap"]})
    for future in admin.create_acls(bindings, request_timeout=p["timeout"]).values():
        future.result(p["timeout"])
    return {}


def connect(p: Params) -> Result:
    """W9 connection set-up: `connections` times a new client, then its first Metadata answer (TCP, TLS,
    SaslHandshake and SaslAuthenticate as `client` asks, ApiVersions, Metadata); p50/p99 in ms."""
    times = []
    for _ in range(p["connections"] + 5):  # the first 5 warm up
        start = time.perf_counter()
        admin = AdminClient({"bootstrap.servers": p["bootstrap"], **p["client"]})
        admin.list_topics(timeout=p["timeout"])
        times.append((time.perf_counter() - start) * 1000)
        del admin
    times = times[5:]
    return {"p50_ms": percentile(times, 50), "p99_ms": percentile(times, 99)}


class _Stats:
    """Keeps librdkafka's latest statistics JSON; counts the Produce requests sent so far."""

    def __init__(self) -> None:
        self.latest: str | None = None

    def __call__(self, raw: str) -> None:
        self.latest = raw

    def produce_requests(self, client: Producer, timeout: float) -> int:
        return self.requests(client, "Produce", timeout)

    def fetches(self, client: Consumer, timeout: float) -> tuple[int, int]:
        """Fetch requests sent and bytes received from the brokers so far."""
        report = json.loads(self._refresh(client, timeout))
        brokers = [b for b in report["brokers"].values() if b.get("nodeid", -1) >= 0]
        return sum(int(b.get("req", {}).get("Fetch", 0)) for b in brokers), sum(int(b["rxbytes"]) for b in brokers)

    def _refresh(self, client: Producer | Consumer, timeout: float) -> str:
        """A statistics report newer than this call."""
        self.latest = None
        deadline = time.monotonic() + timeout
        while self.latest is None:
            if time.monotonic() > deadline:
                raise RuntimeError("no librdkafka statistics")
            client.poll(0.05)
        return self.latest

    def requests(self, client: Producer | Consumer, api: str, timeout: float) -> int:
        """The `api` requests the client has sent so far, from a statistics report newer than this call."""
        brokers = json.loads(self._refresh(client, timeout))["brokers"].values()
        return sum(int(b.get("req", {}).get(api, 0)) for b in brokers)


Work = Callable[[Params, int, Barrier], dict[str, Any]]


def _in_worker(work: Work, p: Params, partition: int, barrier: Barrier, results: Any) -> None:
    """One client process of W3/W12: put `work`'s outcome, or its error, on `results`."""
    try:
        results.put(work(p, partition, barrier))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        results.put({"error": f"{type(exc).__name__}: {exc}"})


def _run_workers(p: Params, count: int, work: Work, while_running: Callable[[], Any] | None = None
                 ) -> tuple[list[dict[str, Any]], Any]:
    """`count` processes running `work` (one partition each), released together by a barrier; with
    `while_running`, this process passes the barrier too and calls it meanwhile. Their outcomes and what
    `while_running` returned; the first worker error is raised."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(count + (while_running is not None))
    results = ctx.Queue()
    workers = [ctx.Process(target=_in_worker, args=(work, p, i, barrier, results)) for i in range(count)]
    for worker in workers:
        worker.start()
    measured = None
    if while_running is not None:
        barrier.wait(p["timeout"])
        measured = while_running()
    outcomes = [results.get(timeout=p["timeout"] + p["seconds"]) for _ in workers]
    for worker in workers:
        worker.join(p["timeout"])
    errors = [o["error"] for o in outcomes if "error" in o]
    if errors:
        raise RuntimeError(errors[0])
    return outcomes, measured


def _rate_produce(p: Params, partition: int, barrier: Barrier) -> dict[str, Any]:
    """Keep up to `window` messages in flight for `seconds`; return requests/s and the latencies."""
    stats = _Stats()
    client = Producer({"bootstrap.servers": p["bootstrap"], "linger.ms": 0, "acks": "all",
                       "statistics.interval.ms": 100, "stats_cb": stats})
    latencies: list[float] = []
    in_flight = 0

    def delivered(err: KafkaError | None, msg: Message) -> None:
        nonlocal in_flight
        in_flight -= 1
        if err is not None:
            raise KafkaException(err)
        latency = msg.latency()
        if latency is not None:
            latencies.append(latency)

    for _ in range(10):
        in_flight += 1
        client.produce(p["topic"], PAYLOAD, partition=partition, on_delivery=delivered)
    client.flush(p["timeout"])
    before = stats.produce_requests(client, p["timeout"])
    latencies.clear()
    barrier.wait(p["timeout"])
    start = time.perf_counter()
    end = start + p["seconds"]
    while time.perf_counter() < end:
        if in_flight < p["window"]:
            in_flight += 1
            client.produce(p["topic"], PAYLOAD, partition=partition, on_delivery=delivered)
            client.poll(0)
        else:
            client.poll(0.05)
    if client.flush(p["timeout"]):
        raise RuntimeError("messages still undelivered")
    elapsed = time.perf_counter() - start
    requests = stats.produce_requests(client, p["timeout"]) - before
    return {"requests_per_s": requests / elapsed, "latencies": latencies}


def request_rate(p: Params) -> Result:
    """W3: `producers` processes, one partition each, linger.ms=0, acks=all; requests/s summed, p99 pooled."""
    create_topic(p["bootstrap"], p["topic"], p["producers"], p["timeout"])
    outcomes, _ = _run_workers(p, p["producers"], _rate_produce)
    latencies = [lat for outcome in outcomes for lat in outcome["latencies"]]
    return {"requests_per_s": sum(o["requests_per_s"] for o in outcomes),
            "p99_ms": percentile(latencies, 99) * 1000}


def _cost_client(p: Params, partition: int, barrier: Barrier) -> dict[str, Any]:
    """One W12 client: its request count and the messages it sent."""
    return _cost_produce(p, partition, barrier) if p["kind"] == "produce" else _cost_fetch(p, partition, barrier)


def _cost_produce(p: Params, partition: int, barrier: Barrier) -> dict[str, Any]:
    """One message in flight at a time (linger.ms=0, acks=all): every Produce request carries one message."""
    stats = _Stats()
    client = Producer({"bootstrap.servers": p["bootstrap"], "linger.ms": 0, "acks": "all",
                       "statistics.interval.ms": 100, "stats_cb": stats})
    pending = [0]

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        pending[0] -= 1
        if err is not None:
            raise KafkaException(err)

    for _ in range(10):
        pending[0] += 1
        client.produce(p["topic"], PAYLOAD, partition=partition, on_delivery=delivered)
    client.flush(p["timeout"])
    before = stats.requests(client, "Produce", p["timeout"])
    barrier.wait(p["timeout"])
    end = time.perf_counter() + p["seconds"]
    sent = 0
    while time.perf_counter() < end:
        if pending[0] == 0:
            pending[0] += 1
            sent += 1
            client.produce(p["topic"], PAYLOAD, partition=partition, on_delivery=delivered)
        client.poll(0.0005 if pending[0] else 0)
    requests = stats.requests(client, "Produce", p["timeout"]) - before
    if client.flush(p["timeout"]):
        raise RuntimeError("messages still undelivered")
    return {"requests": requests, "messages": sent}


def _cost_fetch(p: Params, partition: int, barrier: Barrier) -> dict[str, Any]:
    """A consumer of an empty partition with fetch.wait.max.ms=0: every Fetch is answered at once, empty."""
    stats = _Stats()
    client = Consumer({"bootstrap.servers": p["bootstrap"], "group.id": f"w12-{partition}",
                       "enable.auto.commit": False, "fetch.wait.max.ms": 0, "statistics.interval.ms": 100,
                       "stats_cb": stats})
    client.assign([TopicPartition(p["topic"], partition, OFFSET_BEGINNING)])
    client.consume(num_messages=1, timeout=1.0)  # the connection, the offset lookup and the first fetches
    before = stats.requests(client, "Fetch", p["timeout"])
    barrier.wait(p["timeout"])
    end = time.perf_counter() + p["seconds"]
    while time.perf_counter() < end:
        for message in client.consume(num_messages=100, timeout=0.05):
            if message.error():
                raise KafkaException(message.error())
            raise RuntimeError("the empty partition returned a message")
    requests = stats.requests(client, "Fetch", p["timeout"]) - before
    client.close()
    return {"requests": requests, "messages": 0}


def request_cost(p: Params) -> Result:
    """W12: `clients` processes, one partition each, for `seconds`; the broker's CPU (utime+stime of `pid`)
    over that window divided by the requests the clients counted (librdkafka statistics)."""
    create_topic(p["bootstrap"], p["topic"], p["clients"], p["timeout"])
    return _cost_over_the_window(_run_workers_timed(p, _cost_client))


def _run_workers_timed(p: Params, work: Work) -> tuple[list[dict[str, Any]], tuple[float, float, float]]:
    """`clients` processes of `work`, and the user and system CPU seconds of process `pid` over the
    `seconds` after they start together, with that window's length."""
    def cpu_over_the_window() -> tuple[float, float, float]:
        (user, system), started = cpu_split(p["pid"]), time.perf_counter()
        time.sleep(p["seconds"])
        user_end, system_end = cpu_split(p["pid"])
        return user_end - user, system_end - system, time.perf_counter() - started

    return _run_workers(p, p["clients"], work, cpu_over_the_window)


def _cost_over_the_window(timed: tuple[list[dict[str, Any]], tuple[float, float, float]]) -> Result:
    """Requests/s, and the server's CPU per request (and its kernel part) from `_run_workers_timed`."""
    outcomes, (user, system, elapsed) = timed
    requests = sum(o["requests"] for o in outcomes)
    if not requests:
        raise RuntimeError("no requests counted")
    cpu = user + system
    return {"requests_per_s": requests / elapsed, "cpu_us": cpu / requests * 1e6,
            "kernel_cpu_us": system / requests * 1e6,
            "broker_cpu_share": cpu / elapsed, "messages_per_request": sum(o["messages"] for o in outcomes) / requests}


def empty_fetch_request(topic_id: uuid.UUID, partition: int) -> FetchRequest:
    """The Fetch v16 of one empty partition W12's consumers send (librdkafka: no fetch session,
    fetch.wait.max.ms=0)."""
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=52428800, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic_id=topic_id, partitions=[
                            FetchRequest.FetchPartition(partition=partition, fetch_offset=0, log_start_offset=-1,
                                                        partition_max_bytes=1048576)])])


def empty_fetch_exchange() -> tuple[bytes, int]:
    """An empty Fetch v16 of one partition, framed as librdkafka sends it, and the size after the size
    prefix of its empty answer: the exchange whose cost W12's fetch pass measures."""
    topic_id = uuid.UUID(int=1)
    request = empty_fetch_request(topic_id, 0)
    header = RequestHeader(request_api_key=ApiKey.FETCH, request_api_version=16, correlation_id=0, client_id="rdkafka")
    response = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        FetchResponse.FetchableTopicResponse(topic_id=topic_id, partitions=[FetchResponse.PartitionData(
            partition_index=0, error_code=0, high_watermark=0, last_stable_offset=0, log_start_offset=0,
            aborted_transactions=None, records=b"")])])
    answer = encode_response(0, ApiKey.FETCH, 16, response.encode(16))
    return bytes(encode_request(header, request, 16)), len(answer) - 4


def _floor_client(p: Params, _index: int, barrier: Barrier) -> dict[str, Any]:
    """One connection, one request in flight: send the frame, read its whole answer, for `seconds`."""
    frame = bytes.fromhex(p["frame"])
    requests = 0
    with socket.create_connection(("127.0.0.1", p["port"]), timeout=p["timeout"]) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        barrier.wait(p["timeout"])
        end = time.perf_counter() + p["seconds"]
        while time.perf_counter() < end:
            conn.sendall(frame)
            size = b""
            while len(size) < 4:
                size += _received(conn, 4 - len(size))
            left = int.from_bytes(size, "big")
            while left:
                left -= len(_received(conn, left))
            requests += 1
    return {"requests": requests, "messages": 0}


def _received(conn: socket.socket, at_most: int) -> bytes:
    data = conn.recv(at_most)
    if not data:
        raise RuntimeError("the server closed the connection")
    return data


def request_floor(p: Params) -> Result:
    """The floor under W12: `clients` raw connections ping-pong `frame` with a server that answers each
    request with canned bytes; its CPU (utime+stime of `pid`) over the window per request."""
    return _cost_over_the_window(_run_workers_timed(p, _floor_client))


def roundtrip(p: Params) -> Result:
    """W4: produce one message with acks=all, flush, repeat `sends` times; p50/p99 in ms."""
    create_topic(p["bootstrap"], p["topic"], 1, p["timeout"])
    return _roundtrips(p["bootstrap"], p["topic"], p["sends"], p["timeout"])


def _roundtrips(bootstrap: str, topic: str, sends: int, timeout: float) -> Result:
    client = producer(bootstrap, **{"linger.ms": 0, "acks": "all"})
    samples: list[float] = []
    for i in range(sends + 50):
        start = time.perf_counter()
        client.produce(topic, PAYLOAD, partition=0)
        if client.flush(timeout):
            raise RuntimeError("message undelivered")
        if i >= 50:  # the first 50 only warm the connection up
            samples.append(time.perf_counter() - start)
    return {"p50_ms": percentile(samples, 50) * 1000, "p99_ms": percentile(samples, 99) * 1000}


def replicated(p: Params) -> Result:
    """W6: replication factor 3, min.insync.replicas=2, acks=all: W1's produce, then W4's round trips."""
    create_topic(p["bootstrap"], p["topic"], 1, p["timeout"], replicas=3, config={"min.insync.replicas": "2"})
    client = producer(p["bootstrap"], **{**BATCHING, "acks": "all"})
    produced = produce_all(client, p["topic"], p["messages"], 1, PAYLOAD, p["timeout"])
    return {"produce": p["messages"] / produced, **_roundtrips(p["bootstrap"], p["topic"], p["sends"], p["timeout"])}


def many_partitions(p: Params) -> Result:
    """W5: a topic of `partitions`; Metadata latency p50 for it, then round-robin produce of `messages`."""
    create_topic(p["bootstrap"], p["topic"], p["partitions"], p["timeout"])
    admin = AdminClient({"bootstrap.servers": p["bootstrap"]})
    samples: list[float] = []
    for _ in range(p["metadata_requests"]):
        start = time.perf_counter()
        admin.list_topics(topic=p["topic"], timeout=p["timeout"])
        samples.append(time.perf_counter() - start)
    client = producer(p["bootstrap"], **BATCHING)
    produced = produce_all(client, p["topic"], p["messages"], p["partitions"], PAYLOAD, p["timeout"])
    return {"metadata_ms": percentile(samples, 50) * 1000, "produce": p["messages"] / produced}


def fill(p: Params) -> Result:
    """W7 set-up: write `bytes` of 1,000-byte messages over `partitions` (not a measurement)."""
    create_topic(p["bootstrap"], p["topic"], p["partitions"], p["timeout"])
    payload = b"y" * 1000
    produce_all(producer(p["bootstrap"], **BATCHING), p["topic"], p["bytes"] // len(payload), p["partitions"],
                payload, p["timeout"])
    return {}


def _drop_page_cache() -> bool:
    """Write back and drop the kernel's page cache (root only) so the big log is read from disk."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w", encoding="ascii") as f:
            f.write("1\n")
        return True
    except OSError:
        return False


def _big_reader(bootstrap: str, topic: str, count: int, timeout: float, done: Any, results: Any) -> None:
    """The fetching neighbour: read all of `topic` from its first offset; report MiB/s."""
    try:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "w8-reader", "enable.auto.commit": False,
                             "fetch.queue.backoff.ms": 0})
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got, size, start, deadline = 0, 0, time.perf_counter(), time.perf_counter() + timeout
        while got < count and time.perf_counter() < deadline:
            for message in consumer.consume(num_messages=10000, timeout=1.0):
                if message.error():
                    raise KafkaException(message.error())
                got += 1
                size += len(message.value() or b"")
        consumer.close()
        results.put({"fetch_mib_per_s": size / MIB_BYTES / max(time.perf_counter() - start, 1e-9), "fetched": got})
    except Exception as exc:  # reported to the parent, which raises it
        results.put({"error": f"reader: {exc}"})
    finally:
        done.set()


def _committer(bootstrap: str, topic: str, done: Any, results: Any) -> None:
    """The committing neighbour: synchronous OffsetCommits in a loop until the reader is done."""
    try:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "w8-committer", "enable.auto.commit": False})
        commits, start = 0, time.perf_counter()
        while not done.is_set():
            consumer.commit(offsets=[TopicPartition(topic, 0, commits + 1)], asynchronous=False)
            commits += 1
        consumer.close()
        results.put({"commits_per_s": commits / max(time.perf_counter() - start, 1e-9)})
    except Exception as exc:
        results.put({"error": f"committer: {exc}"})


def noisy_neighbour(p: Params) -> Result:
    """W8: p50/p99 of a one-message acks=all produce while one client reads `bytes` from the start of a cold
    log and another commits offsets in a loop; the produce samples stop when the reader is done."""
    bootstrap, timeout = p["bootstrap"], p["timeout"]
    for topic in ("w8-big", "w8-small"):
        create_topic(bootstrap, topic, 1, timeout)
    payload = b"z" * 1000
    count = p["bytes"] // len(payload)
    produce_all(producer(bootstrap, **BATCHING), "w8-big", count, 1, payload, timeout)
    dropped = _drop_page_cache()
    ctx = multiprocessing.get_context("spawn")
    done, results = ctx.Event(), ctx.Queue()
    workers = [ctx.Process(target=_big_reader, args=(bootstrap, "w8-big", count, timeout, done, results)),
               ctx.Process(target=_committer, args=(bootstrap, "w8-small", done, results))]
    client = producer(bootstrap, **{"linger.ms": 0, "acks": "all"})
    for _ in range(50):  # warm the connection up, outside the measurement
        client.produce("w8-small", PAYLOAD, partition=0)
        client.flush(timeout)
    for worker in workers:
        worker.start()
    samples: list[float] = []
    deadline = time.perf_counter() + timeout
    while not done.is_set() and time.perf_counter() < deadline:
        start = time.perf_counter()
        client.produce("w8-small", PAYLOAD, partition=0)
        if client.flush(timeout):
            raise RuntimeError("message undelivered")
        samples.append(time.perf_counter() - start)
    done.set()
    outcome: Result = {}
    for _ in workers:
        outcome.update(results.get(timeout=timeout))
    for worker in workers:
        worker.join(timeout)
    if "error" in outcome:
        raise RuntimeError(outcome["error"])
    if not samples:
        raise RuntimeError("the reader finished before any produce was measured")
    return {"p50_ms": percentile(samples, 50) * 1000, "p99_ms": percentile(samples, 99) * 1000,
            "sends": len(samples), "cache_dropped": float(dropped), **outcome}


def sink_send(p: Params) -> Result:
    """Machine limit: send `bytes` to the sink in 1 MiB writes; time until it has appended them all."""
    chunk = memoryview(bytes(1 << 20))
    with socket.create_connection(("127.0.0.1", p["port"]), timeout=p["timeout"]) as conn:
        start = time.perf_counter()
        sent = 0
        while sent < p["bytes"]:
            n = min(len(chunk), p["bytes"] - sent)
            conn.sendall(chunk[:n])
            sent += n
        conn.shutdown(socket.SHUT_WR)
        if conn.recv(1) != b"k":
            raise RuntimeError("sink closed without acknowledging")
        elapsed = time.perf_counter() - start
    return {"msgs_per_s": p["bytes"] / len(PAYLOAD) / elapsed, "mib_per_s": p["bytes"] / (1 << 20) / elapsed}


def _port_opens(port: int, opened: list[float], deadline: float) -> None:
    """Record when a TCP connection to `port` first succeeds (the listener is bound)."""
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            opened.append(time.perf_counter())
            return
        except OSError:
            time.sleep(0.002)


def _rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status").read().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc status")


def _kill(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait()


def startup(p: Params) -> Result:
    """W10: a broker from nothing (pybroker: `EmbeddedBroker()`, the testing API; Tansu: its binary) to its
    port accepting connections, then to a first acks=all produce acknowledged on a topic created for it;
    then the idle broker's RSS."""
    port = p["port"]
    opened: list[float] = []
    started = time.perf_counter()
    poller = threading.Thread(target=_port_opens, args=(port, opened, time.monotonic() + p["timeout"]), daemon=True)
    poller.start()
    if p["broker"] == "pybroker":
        from pybroker.testing import EmbeddedBroker

        broker: Any = EmbeddedBroker(port=port, tmp_dir=p["scratch"]).start()
        pid, stop = broker.pid, broker.close
    else:
        url = f"tcp://127.0.0.1:{port}"
        process = subprocess.Popen([p["tansu"], "broker", "--listener-url", url, "--advertised-listener-url", url,
                                    "--storage-engine", "memory://tansu/"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        pid, stop = process.pid, functools.partial(_kill, process)
    try:
        poller.join()
        if not opened:
            raise RuntimeError(f"port {port} never opened")
        bootstrap = f"127.0.0.1:{port}"
        create_topic(bootstrap, "first", 1, p["timeout"])
        client = producer(bootstrap, **{"linger.ms": 0, "acks": "all"})
        client.produce("first", PAYLOAD, partition=0)
        if client.flush(p["timeout"]):
            raise RuntimeError("message undelivered")
        produced = time.perf_counter()
        return {"port_open_s": opened[0] - started, "first_produce_s": produced - started, "rss_mb": _rss_mb(pid)}
    finally:
        stop()


OPS: dict[str, Callable[[Params], Result]] = {
    "warmup": warmup, "produce_consume": produce_consume, "request_rate": request_rate, "roundtrip": roundtrip,
    "many_partitions": many_partitions, "replicated": replicated, "fill": fill, "sink_send": sink_send,
    "noisy_neighbour": noisy_neighbour, "scram_user": scram_user, "connect": connect, "startup": startup,
    "allow_acls": allow_acls, "request_cost": request_cost, "request_floor": request_floor,
}

if __name__ == "__main__":
    print(json.dumps(OPS[sys.argv[1]](json.loads(sys.argv[2]))))
