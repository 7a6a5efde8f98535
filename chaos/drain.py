"""The drain: after the heal (or when it failed, of whatever still leads), fresh consumers read every
partition from offset 0 to its end, read_committed (`read` events) and, for the transactional topics,
read_uncommitted too (`read-uncommitted`: aborted records must be there, since their produce was
acknowledged). A partition whose end cannot be learnt is left out and named in the `drain` event."""

from __future__ import annotations

import contextlib
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from chaos.history import History
from chaos.workload import consumer_config, value_text

RETRY_END_OFFSET = (KafkaError._UNKNOWN_PARTITION, KafkaError.NOT_LEADER_FOR_PARTITION,
                    KafkaError.LEADER_NOT_AVAILABLE)
ISOLATION = {"read": "read_committed", "read-uncommitted": "read_uncommitted"}
#: how long the read_committed drain waits for open transactions to end (the workload's transaction.timeout.ms
#: is 30 s: one whose producer died open is aborted by then)
SETTLE_TIMEOUT = 35.0


def _end_offset(consumer: Consumer, partition: TopicPartition, deadline: float) -> int:
    """The partition's end (the LSO, read_committed), asked again while the new consumer's metadata
    does not know the partition yet ("Unknown partition") or still names a broker that has since
    handed leadership on (after the heal, preferred leaders take over), or the call times out, until
    `deadline`."""
    while True:
        try:
            offsets = consumer.get_watermark_offsets(partition, timeout=10)
        except KafkaException as exc:
            if time.monotonic() >= deadline:
                raise
            error = exc.args[0]
            if not (error.retriable() or error.code() in RETRY_END_OFFSET):
                raise
            time.sleep(0.2)
            continue
        if offsets is not None:
            return offsets[1]
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no end offset for {partition.topic}-{partition.partition}")


def _settled_ends(consumer: Consumer, bootstrap: str, ends: dict[tuple[str, int], int],
                  until: float) -> dict[tuple[str, int], int]:
    """The read_committed ends once each has reached its partition's high watermark, or as they are at `until`.

    A commit is answered once its Prepare record is replicated, and its markers are written after (as in
    Kafka), so a transaction committed just before the heal may still hold a partition's LSO back when the
    drain starts; one whose producer died open is aborted after its transaction timeout. Reading only up to
    that LSO would take the committed records behind it for lost."""
    uncommitted = Consumer(consumer_config(bootstrap, **{"group.id": "chaos-drain-settle",
                                                         "isolation.level": "read_uncommitted"}))
    try:
        high = {}
        for (topic, p) in ends:
            try:
                high[(topic, p)] = _end_offset(uncommitted, TopicPartition(topic, p), time.monotonic() + 10)
            except (KafkaException, TimeoutError):
                high[(topic, p)] = ends[(topic, p)]
        while True:
            behind = [tp for tp in ends if ends[tp] < high[tp]]
            if not behind or time.monotonic() >= until:
                return ends
            time.sleep(0.5)  # polling the LSO until the markers land, not a synchronisation by time
            for tp in behind:
                with contextlib.suppress(KafkaException, TimeoutError):  # kept as it was, asked again next pass
                    ends[tp] = _end_offset(consumer, TopicPartition(*tp), time.monotonic() + 5)
    finally:
        uncommitted.close()


def drain(history: History, bootstrap: str, topics: list[str], partitions: int, timeout: float,
          event: str = "read") -> None:
    """Read every partition of `topics` from offset 0 to its end; `event` "read" reads committed data,
    "read-uncommitted" everything."""
    process = "drain" if event == "read" else "drain-uncommitted"
    consumer = Consumer(consumer_config(bootstrap, **{"group.id": f"chaos-{process}",
                                                      "isolation.level": ISOLATION[event]}))
    try:
        ends: dict[tuple[str, int], int] = {}
        unknown: dict[str, str] = {}
        deadline = time.monotonic() + timeout
        for topic in topics:
            for p in range(partitions):
                try:
                    until = max(deadline, time.monotonic() + 5)  # past the deadline, 5 s for each partition left
                    ends[(topic, p)] = _end_offset(consumer, TopicPartition(topic, p), until)
                except (KafkaException, TimeoutError) as exc:
                    unknown[f"{topic}-{p}"] = str(exc)
        if event == "read":
            ends = _settled_ends(consumer, bootstrap, ends, time.monotonic() + SETTLE_TIMEOUT)
            deadline = max(deadline, time.monotonic() + 10)
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in ends])
        position = {tp: 0 for tp in ends}
        while time.monotonic() < deadline and any(position[tp] < ends[tp] for tp in ends):
            msg = consumer.poll(0.5)
            if msg is None:
                # read_committed skips control records (and aborted ones): ask where the consumer stands
                for tp in consumer.position([TopicPartition(t, p) for t, p in ends]):
                    if tp.offset >= 0:
                        position[(tp.topic, tp.partition)] = max(position[(tp.topic, tp.partition)], tp.offset)
                continue
            if msg.error() is not None:
                continue
            key, place = msg.key(), (str(msg.topic()), int(msg.partition() or 0))
            offset = int(msg.offset() or 0)
            history.add(event, process=process, topic=place[0], partition=place[1], offset=offset,
                        value=value_text(msg), **({"key": key.decode()} if key is not None else {}))
            position[place] = offset + 1
        behind = {f"{t}-{p}": [position[(t, p)], ends[(t, p)]] for t, p in ends if position[(t, p)] < ends[(t, p)]}
        history.add("drain", process=process, complete=not behind and not unknown, behind=behind, unknown=unknown,
                    ends={f"{t}-{p}": e for (t, p), e in ends.items()})
    finally:
        consumer.close()
