"""W13/W14's client load (many partitions), in a process of its own: `python -m benchmarks.scale_load OP JSON`.

Topics are `<prefix>-<i>` (i from 0) of `per_topic` partitions each. Every wait is bounded by
`params["timeout"]`; a refused creation or a failed delivery raises, and the harness records n/a with
the message. Times that span a broker restart are measured from `since`, the harness's wall clock when
it spawned or killed the broker, so the start of this process is counted in them, never left out.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic

from benchmarks.load import PAYLOAD, producer
from pybroker.controller.requests import UPDATE_METADATA_VERSION
from pybroker.protocol.frame import encode_request
from pybroker.protocol.messages import UpdateMetadataRequest
from pybroker.protocol.messages.request_header import RequestHeader

Params = dict[str, Any]
Result = dict[str, float]
SECURITY_PROTOCOL_PLAINTEXT = 0


def topic_names(p: Params) -> list[str]:
    return [f"{p['prefix']}-{i}" for i in range(p["topics"])]


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _metadata(admin: AdminClient, timeout: float) -> ClusterMetadata | None:
    try:
        return admin.list_topics(timeout=min(timeout, 10))
    except KafkaException:
        return None  # not answering yet (restarting): asked again


def _all_led(metadata: ClusterMetadata | None, p: Params, live: set[int] | None = None, isr: int = 0) -> bool:
    """Every partition of every topic exists with a leader (on a `live` broker), and `isr` replicas in sync."""
    if metadata is None:
        return False
    for name in topic_names(p):
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None or len(topic.partitions) != p["per_topic"]:
            return False
        for partition in topic.partitions.values():
            if partition.leader < 0 or (live is not None and partition.leader not in live) \
                    or len(partition.isrs) < isr:
                return False
    return True


def _wait(p: Params, admin: AdminClient, done: Callable[[ClusterMetadata | None], bool], what: str) -> None:
    deadline = time.monotonic() + p["timeout"]
    while not done(_metadata(admin, p["timeout"])):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not reached after {p['timeout']:.0f} s")
        time.sleep(0.05)


def create(p: Params) -> Result:
    """Create the topics, `batch` of them per CreateTopics request, and wait until every partition has a
    leader and `replicas` replicas in sync; the seconds from the first request to then."""
    admin = _admin(p["bootstrap"])
    deadline = time.monotonic() + p["timeout"]
    while len(admin.list_topics(timeout=p["timeout"]).brokers) < p["replicas"]:  # brokers register one by one
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {p['replicas']} brokers registered after {p['timeout']:.0f} s")
        time.sleep(0.1)
    names = topic_names(p)
    started = time.perf_counter()
    for first in range(0, len(names), p["batch"]):
        futures = admin.create_topics([NewTopic(name, p["per_topic"], p["replicas"])
                                       for name in names[first:first + p["batch"]]],
                                      operation_timeout=p["timeout"], request_timeout=p["timeout"])
        for name, future in futures.items():
            try:
                future.result(p["timeout"])
            except KafkaException as exc:
                raise RuntimeError(f"creating {name} (after {first} topics) failed: {exc.args[0]}") from None
    _wait(p, admin, lambda m: _all_led(m, p, isr=p["replicas"]), "every partition led with its ISR full")
    return {"create_s": time.perf_counter() - started}


def produce_all(p: Params, messages_per_partition: int) -> float:
    """`messages_per_partition` messages to every partition (acks as `acks`); the seconds it took."""
    client = producer(p["bootstrap"], **{"linger.ms": 5, "batch.size": 1048576, "acks": p.get("acks", 1),
                                         "queue.buffering.max.messages": 2_000_000})
    started = time.perf_counter()
    for _ in range(messages_per_partition):
        for name in topic_names(p):
            for partition in range(p["per_topic"]):
                while True:
                    try:
                        client.produce(name, PAYLOAD, partition=partition)
                        break
                    except BufferError:
                        client.poll(0.001)
    if client.flush(p["timeout"]):
        raise RuntimeError(f"messages still undelivered after {p['timeout']:.0f} s")
    return time.perf_counter() - started


def produce_fetch(p: Params) -> Result:
    """`messages` per partition to every partition, then all of them read back from the beginning with
    every partition assigned to one consumer (no group); msgs/s of each."""
    count = p["messages"] * p["topics"] * p["per_topic"]
    produced = produce_all(p, p["messages"])
    consumer = Consumer({"bootstrap.servers": p["bootstrap"], "group.id": "w13", "enable.auto.commit": False,
                         "fetch.queue.backoff.ms": 0})
    started = time.perf_counter()
    consumer.assign([TopicPartition(name, partition, OFFSET_BEGINNING) for name in topic_names(p)
                     for partition in range(p["per_topic"])])
    got = 0
    deadline = started + p["timeout"]
    while got < count:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"consumed {got} of {count} messages in {p['timeout']:.0f} s")
        for message in consumer.consume(num_messages=10000, timeout=1.0):
            if message.error() is not None:
                raise KafkaException(message.error())
            got += 1
    fetched = time.perf_counter() - started
    consumer.close()
    return {"produce": count / produced, "fetch": count / fetched, "produce_s": produced, "fetch_s": fetched}


def until_serving(p: Params) -> Result:
    """After a broker (re)start at `since`: seconds until every partition is led again (Metadata, with `isr`
    replicas in sync), then until a message is acknowledged (acks=all) on the first and the last partition."""
    admin = _admin(p["bootstrap"])
    _wait(p, admin, lambda m: _all_led(m, p, isr=p.get("isr", 0)), "every partition led")
    led = time.time() - p["since"]
    client = producer(p["bootstrap"], **{"linger.ms": 0, "acks": "all"})
    names = topic_names(p)
    client.produce(names[0], PAYLOAD, partition=0)
    client.produce(names[-1], PAYLOAD, partition=p["per_topic"] - 1)
    if client.flush(p["timeout"]):
        raise RuntimeError(f"messages still undelivered after {p['timeout']:.0f} s")
    return {"led_s": led, "produced_s": time.time() - p["since"]}


def failover(p: Params) -> Result:
    """After the controller `dead` was killed at `since`: seconds until another broker is the controller,
    and until every partition is led by a live broker (Metadata from the survivors in `bootstrap`)."""
    admin = _admin(p["bootstrap"])
    live = set(p["live"])
    _wait(p, admin, lambda m: m is not None and m.controller_id in live, "a new controller")
    controller = time.time() - p["since"]
    _wait(p, admin, lambda m: _all_led(m, p, live=live), "every partition led by a live broker")
    return {"controller_s": controller, "led_s": time.time() - p["since"]}


def controller(p: Params) -> Result:
    """The id of the cluster's controller."""
    return {"controller": _admin(p["bootstrap"]).list_topics(timeout=p["timeout"]).controller_id}


def update_metadata_bytes(p: Params) -> Result:
    """The size of a full UpdateMetadata, what a new controller sends every broker: the cluster's brokers and
    the state of every partition (from Metadata), encoded at the version pybroker's controller sends (epochs
    and versions are fixed-size fields, so their values do not change the size)."""
    metadata = _admin(p["bootstrap"]).list_topics(timeout=p["timeout"])
    if any(b.host is None for b in metadata.brokers.values()):
        raise RuntimeError(f"a broker without a host in {metadata.brokers}")
    brokers = [UpdateMetadataRequest.UpdateMetadataBroker(id=b.id, rack=None, endpoints=[
        UpdateMetadataRequest.UpdateMetadataEndpoint(port=b.port, host=str(b.host), listener="PLAINTEXT",
                                                     security_protocol=SECURITY_PROTOCOL_PLAINTEXT)])
        for b in sorted(metadata.brokers.values(), key=lambda b: b.id)]
    topics = [UpdateMetadataRequest.UpdateMetadataTopicState(
        topic_name=name, partition_states=[UpdateMetadataRequest.UpdateMetadataPartitionState(
            partition_index=index, controller_epoch=1, leader=partition.leader, leader_epoch=1,
            isr=list(partition.isrs), zk_version=1, replicas=list(partition.replicas), offline_replicas=[])
            for index, partition in sorted(metadata.topics[name].partitions.items())])
        for name in topic_names(p)]
    request = UpdateMetadataRequest(controller_id=0, controller_epoch=1, broker_epoch=1, live_brokers=brokers,
                                    topic_states=topics)
    header = RequestHeader(request_api_key=request.API_KEY, request_api_version=UPDATE_METADATA_VERSION,
                           correlation_id=1, client_id="controller")
    return {"bytes": len(encode_request(header, request, UPDATE_METADATA_VERSION))}


OPS: dict[str, Callable[[Params], Result]] = {
    "create": create, "produce_fetch": produce_fetch, "until_serving": until_serving, "failover": failover,
    "controller": controller, "update_metadata_bytes": update_metadata_bytes,
}

if __name__ == "__main__":
    print(json.dumps(OPS[sys.argv[1]](json.loads(sys.argv[2]))))
