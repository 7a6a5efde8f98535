"""Log compaction end to end: a real broker process, confluent-kafka clients, SIGKILL mid-clean."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess

CLEANER = {"log.cleaner.backoff.ms": "200"}
BEGIN = "Beginning cleaning of log crashy-0"
SEGMENT_BYTES = 16384


def create_compacted_topic(bootstrap: str, name: str, **extra: str) -> None:
    configs = {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES),
               "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "500", **extra}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1, config=configs)])
    futures[name].result(timeout=30)


def read_partition(bootstrap: str, topic: str,
                   isolation: str = "read_uncommitted") -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record from the beginning to the end of partition 0."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                         "enable.partition.eof": True, "check.crcs": True, "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes | None, bytes | None]] = []
    try:
        while True:
            msg = consumer.poll(10)
            assert msg is not None, f"timed out after {len(out)} records"
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return out
            out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()


def produce_acked(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> dict[int, int]:
    """Produce in order; returns index in ``records`` -> acknowledged offset."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4",
                         "enable.idempotence": True})
    acked: dict[int, int] = {}
    for i, (key, value) in enumerate(records):
        def on_delivery(err, msg, i=i):
            assert err is None, err
            acked[i] = msg.offset()
        producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    return acked


def test_compacted_topic_keeps_the_latest_value_per_key_at_the_original_offsets(tmp_path):
    broker = BrokerProcess(tmp_path, CLEANER).start()
    try:
        topic = "compacted"
        create_compacted_topic(broker.bootstrap, topic)
        keys = [f"key-{k:03d}".encode() for k in range(60)]
        deleted = set(keys[:6])
        updates = [(keys[k], f"{keys[k].decode()}-round-{r}-{'x' * 40}".encode())
                   for r in range(40) for k in range(len(keys))]
        tombstones = [(key, None) for key in sorted(deleted)]
        acked = produce_acked(broker.bootstrap, topic, updates + tombstones)
        # One large record in its own batch: it rolls the segment, so every other record is cleanable.
        sentinel = (b"sentinel", b"s" * SEGMENT_BYTES)
        sent = updates + tombstones + [sentinel]
        acked[len(sent) - 1] = produce_acked(broker.bootstrap, topic, [sentinel])[0]
        assert len(acked) == len(sent)
        latest = {key: i for i, (key, _) in enumerate(sent)}
        expected = sorted((acked[i], key, sent[i][1]) for key, i in latest.items() if key not in deleted)

        records: list = []

        def compacted() -> bool:
            records[:] = read_partition(broker.bootstrap, topic)
            return records == expected

        eventually(compacted, lambda: f"one record per key, the latest value at its acknowledged offset: "
                                      f"{len(records)} records left, want {len(expected)}", interval=0.25)
        offsets = [offset for offset, _, _ in records]
        assert offsets == sorted(set(offsets))
        assert broker.wait_for_log(r"Cleaned log compacted-0")
    finally:
        broker.kill()


def test_sigkill_during_cleaning_leaves_a_consistent_log(tmp_path):
    topic = "crashy"
    keys = [f"key-{k:04d}".encode() for k in range(1500)]
    sent: list[tuple[bytes, bytes]] = []
    acked: dict[int, int] = {}
    stop = threading.Event()
    broker = BrokerProcess(tmp_path, CLEANER).start()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "all",
                             "message.timeout.ms": 5000, "retries": 0, "compression.type": "snappy"})
        i = 0
        while not stop.is_set():
            key = keys[i % len(keys)]
            sent.append((key, f"{key.decode()}:{i:07d}:{'v' * 80}".encode()))

            def on_delivery(err, msg, i=i):
                if err is None:
                    acked[i] = msg.offset()
            try:
                producer.produce(topic, key=key, value=sent[-1][1], on_delivery=on_delivery)
                i += 1
            except BufferError:
                sent.pop()
                producer.poll(0.01)
            producer.poll(0)
        producer.purge()  # the broker is gone: what is still queued will never be acknowledged
        producer.flush(1)

    worker = threading.Thread(target=produce)
    try:
        # A high ratio makes passes rare and large, so that the kill lands inside one.
        create_compacted_topic(broker.bootstrap, topic, **{"segment.bytes": "65536",
                                                           "min.cleanable.dirty.ratio": "0.8"})
        worker.start()
        # Kill right as a pass over a few MB of segments begins: the thread part, the renames
        # or the checkpoint is then in progress.
        deadline = time.monotonic() + 30
        while len(acked) < 20_000 and time.monotonic() < deadline:
            time.sleep(0.05)
        passes = broker.log_text().count(BEGIN)
        deadline = time.monotonic() + 20
        while broker.log_text().count(BEGIN) == passes and time.monotonic() < deadline:
            time.sleep(0.02)
        assert broker.log_text().count(BEGIN) > passes, "no cleaner pass began"
        broker.kill()
        stop.set()
        worker.join(30)
        assert len(acked) > 5000

        broker.start()
        records = read_partition(broker.bootstrap, topic)
        offsets = [offset for offset, _, _ in records]
        assert offsets == sorted(set(offsets)), "offsets strictly increase"
        last_seen = {key: int(value.split(b":")[1]) for _, key, value in records}
        by_offset = {offset: (key, value) for offset, key, value in records}
        newest_acked = {sent[i][0]: i for i in sorted(acked)}
        for key, index in newest_acked.items():
            # Written but unacknowledged updates may have survived too; older ones may not.
            assert last_seen.get(key, -1) >= index, f"{key!r}: acknowledged update {index} lost"
            if last_seen[key] == index:
                assert by_offset[acked[index]] == sent[index], "a survivor keeps its acknowledged offset"
        produce_acked(broker.bootstrap, topic, [(b"after-restart", b"works")])
        assert read_partition(broker.bootstrap, topic)[-1][1:] == (b"after-restart", b"works")
    finally:
        stop.set()
        if worker.is_alive():
            worker.join(30)
        broker.kill()


def test_compacted_topic_refuses_records_without_a_key(broker: BrokerProcess):
    create_compacted_topic(broker.bootstrap, "keyless")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0, "linger.ms": 0})
    errors: list[KafkaError] = []
    producer.produce("keyless", value=b"no key", on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(30) == 0
    producer.produce("keyless", key=b"k", value=b"keyed", on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(30) == 0
    assert [e.code() if e else None for e in errors] == [KafkaError.INVALID_RECORD, None]
    assert [(key, value) for _, key, value in read_partition(broker.bootstrap, "keyless")] == [(b"k", b"keyed")]


def test_cleaner_removes_aborted_transactions_and_keeps_committed_ones(tmp_path):
    broker = BrokerProcess(tmp_path, CLEANER).start()
    try:
        topic = "txn-compacted"
        create_compacted_topic(broker.bootstrap, topic)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "compacting",
                             "linger.ms": 5})
        producer.init_transactions(30)

        def transaction(records: list[tuple[bytes, bytes]], *, commit: bool) -> None:
            producer.begin_transaction()
            for key, value in records:
                producer.produce(topic, key=key, value=value)
            assert producer.flush(30) == 0  # an abort would purge what is still queued
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)

        keys = [f"key-{k:03d}".encode() for k in range(40)]
        committed = [(key, b"committed-" + key + b"-" + b"c" * 200) for key in keys]
        transaction(committed, commit=True)
        transaction([(key, b"aborted-" + key + b"-" + b"a" * 200) for key in keys]
                    + [(b"aborted-only", b"aborted")], commit=False)
        # A large committed record rolls the segment, so both transactions above are cleanable.
        sentinel = (b"sentinel", b"s" * SEGMENT_BYTES)
        transaction([sentinel], commit=True)
        expected = committed + [sentinel]

        eventually(lambda: [(key, value) for _, key, value in read_partition(broker.bootstrap, topic)] == expected,
                   "read_uncommitted to see no aborted value: they are gone from the log", interval=0.25)
        assert broker.wait_for_log(r"Cleaned log txn-compacted-0")
        read_committed = read_partition(broker.bootstrap, topic, "read_committed")
        assert [(key, value) for _, key, value in read_committed] == expected
    finally:
        broker.kill()
