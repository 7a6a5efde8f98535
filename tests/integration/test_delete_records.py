"""DeleteRecords (21) on one broker, through confluent-kafka, kafka-python, raw requests and `pybroker
delete-records`, checked against Kafka 3.9's answers: the low watermark, -1 meaning the high watermark,
OFFSET_OUT_OF_RANGE past it, POLICY_VIOLATION on compact-only topics, INVALID_TOPIC_EXCEPTION on internal
topics; consumers reset past the deleted records; retention removes the segments below the new start,
log-start-offset-checkpoint keeps it, and a restart (clean or SIGKILL after the checkpoint) too."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import OffsetOutOfRangeError

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_cli_topics import run

COUNT = 100


def create_topic(bootstrap: str, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                            config=configs or {})])
    futures[name].result(timeout=30)


def produce(bootstrap: str, topic: str, count: int = COUNT, partitions: int = 1, **config: object) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()




def delete(client: WireClient, offsets: dict[tuple[str, int], int], version: int = 2,
           timeout_ms: int = 30000) -> dict[tuple[str, int], tuple[int, int]]:
    """(error code, low watermark) per partition of one raw DeleteRecords request."""
    topics: dict[str, list[DeleteRecordsRequest.DeleteRecordsPartition]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(DeleteRecordsRequest.DeleteRecordsPartition(
            partition_index=partition, offset=offset))
    response = client.request(DeleteRecordsRequest(timeout_ms=timeout_ms, topics=[
        DeleteRecordsRequest.DeleteRecordsTopic(name=t, partitions=p) for t, p in topics.items()]),
        version, DeleteRecordsResponse)
    return {(t.name, p.partition_index): (p.error_code, p.low_watermark) for t in response.topics
            for p in t.partitions}


def test_confluent_delete_records_then_consumers_start_at_the_low_watermark(shared_broker):
    topic = "dr-confluent"
    create_topic(shared_broker.bootstrap, topic)
    produce(shared_broker.bootstrap, topic)
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    deleted = admin.delete_records([TopicPartition(topic, 0, 40)])
    assert [f.result(timeout=30).low_watermark for f in deleted.values()] == [40]
    assert watermarks(shared_broker.bootstrap, topic) == (40, COUNT)

    # A fetch below the log start is OFFSET_OUT_OF_RANGE: auto.offset.reset=earliest lands on 40.
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "dr-reset",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 10)])
        msg = consumer.poll(15)
        assert msg is not None and msg.error() is None, msg and msg.error()
        assert (msg.offset(), msg.value()) == (40, b"v40")
    finally:
        consumer.close()

    # OFFSET_END (-1) deletes up to the high watermark: nothing is left to read.
    deleted = admin.delete_records([TopicPartition(topic, 0, -1)])
    assert [f.result(timeout=30).low_watermark for f in deleted.values()] == [COUNT]
    assert watermarks(shared_broker.bootstrap, topic) == (COUNT, COUNT)

    # Past the high watermark: the partition's future fails with OFFSET_OUT_OF_RANGE.
    failed = admin.delete_records([TopicPartition(topic, 0, COUNT + 1)])
    with pytest.raises(KafkaException) as raised:
        [f.result(timeout=30) for f in failed.values()]
    assert raised.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE


def test_kafka_python_delete_records(shared_broker):
    topic = "dr-kafka-python"
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    produce(shared_broker.bootstrap, topic, partitions=2)
    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        result = admin.delete_records({KpTopicPartition(topic, 0): 20, KpTopicPartition(topic, 1): -1})
        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({KpTopicPartition(topic, 0): COUNT})
    finally:
        admin.close()
    lows = {tp.partition: (meta["error_code"], meta["low_watermark"]) for tp, meta in result.items()}
    assert lows == {0: (0, 20), 1: (0, COUNT // 2)}
    assert watermarks(shared_broker.bootstrap, topic, 0) == (20, COUNT // 2)
    assert watermarks(shared_broker.bootstrap, topic, 1) == (COUNT // 2, COUNT // 2)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_raw_requests_every_version_and_kafkas_error_codes(shared_broker, version):
    topic, compacted, both = f"dr-raw-{version}", f"dr-compact-{version}", f"dr-compact-delete-{version}"
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    create_topic(shared_broker.bootstrap, compacted, configs={"cleanup.policy": "compact"})
    create_topic(shared_broker.bootstrap, both, configs={"cleanup.policy": "compact,delete"})
    produce(shared_broker.bootstrap, topic, partitions=2)
    for name in (compacted, both):
        producer = Producer({"bootstrap.servers": shared_broker.bootstrap})
        for i in range(10):
            producer.produce(name, key=b"k%d" % i, value=b"v")
        assert producer.flush(30) == 0
    client = WireClient(shared_broker.bootstrap)
    try:
        _offsets_topic_exists(client)
        answers = delete(client, {(topic, 0): 30, (topic, 1): COUNT // 2 + 1, (topic, 7): 1,
                                  (compacted, 0): 5, (both, 0): 5, ("dr-no-such-topic", 0): 1,
                                  ("__consumer_offsets", 0): 0}, version)
        assert answers == {
            (topic, 0): (ErrorCode.NONE, 30),
            (topic, 1): (ErrorCode.OFFSET_OUT_OF_RANGE, -1),
            (topic, 7): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
            (compacted, 0): (ErrorCode.POLICY_VIOLATION, -1),
            (both, 0): (ErrorCode.NONE, 5),
            ("dr-no-such-topic", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
            ("__consumer_offsets", 0): (ErrorCode.INVALID_TOPIC_EXCEPTION, -1),
        }
        # An offset below the log start changes nothing and answers the current low watermark;
        # negative offsets other than -1 are out of range; -1 is the high watermark.
        assert delete(client, {(topic, 0): 10, (topic, 1): -2}, version) == {
            (topic, 0): (ErrorCode.NONE, 30), (topic, 1): (ErrorCode.OFFSET_OUT_OF_RANGE, -1)}
        assert delete(client, {(topic, 1): -1}, version) == {(topic, 1): (ErrorCode.NONE, COUNT // 2)}
        # timeout_ms 0 on one broker: nothing to wait for, answered at once.
        assert delete(client, {(topic, 0): 31}, version, timeout_ms=0) == {(topic, 0): (ErrorCode.NONE, 31)}
    finally:
        client.close()
    assert watermarks(shared_broker.bootstrap, topic, 0) == (31, COUNT // 2)


def _offsets_topic_exists(client: WireClient) -> None:
    """FindCoordinator creates __consumer_offsets (as Kafka's does); wait until Metadata lists it."""
    def listed() -> bool:
        client.request(FindCoordinatorRequest(key="dr-group", key_type=0), 3, FindCoordinatorResponse)
        response = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name="__consumer_offsets")], allow_auto_topic_creation=False), 9, MetadataResponse)
        return response.topics[0].error_code == ErrorCode.NONE

    eventually(listed, "__consumer_offsets")


def test_cli_prints_kafkas_lines(shared_broker, tmp_path: Path):
    topic = "dr-cli"
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    produce(shared_broker.bootstrap, topic, partitions=2)
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 10},
                                                  {"topic": topic, "partition": 1, "offset": 999},
                                                  {"topic": "dr-cli-missing", "partition": 0, "offset": 1}],
                                   "version": 1}))
    result = run("delete-records", "--bootstrap-server", shared_broker.bootstrap, "--offset-json-file", str(offsets))
    assert (result.returncode, result.stderr) == (0, ""), result
    assert result.stdout.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {topic}-0\tlow_watermark: 10",
        f"partition: {topic}-1\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException: "
        "The requested offset is not within the range of offsets maintained by the server.",
        "partition: dr-cli-missing-0\terror: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
        "This server does not host this topic-partition.",
    ]
    assert watermarks(shared_broker.bootstrap, topic, 0) == (10, COUNT // 2)

    offsets.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 1},
                                                  {"topic": topic, "partition": 0, "offset": 2}]}))
    result = run("delete-records", "--bootstrap-server", shared_broker.bootstrap, "--offset-json-file", str(offsets))
    assert (result.returncode, result.stdout, result.stderr) == (
        1, "", f"Error: Offset json file contains duplicate topic partitions: {topic}-0\n")
    offsets.write_text(json.dumps({"partitions": [], "version": 2}))
    result = run("delete-records", "--bootstrap-server", shared_broker.bootstrap, "--offset-json-file", str(offsets))
    assert (result.returncode, result.stderr) == (1, "Error: Not supported version field value 2\n")
    result = run("delete-records", "--bootstrap-server", shared_broker.bootstrap)
    assert result.returncode == 1 and "--offset-json-file must be specified" in result.stderr


def segment_bases(log_dir: Path) -> list[int]:
    return sorted(int(name[:-4]) for name in os.listdir(log_dir) if name.endswith(".log"))


def checkpointed_start(root: Path, topic: str) -> int | None:
    path = root / "log-start-offset-checkpoint"
    if not path.exists():
        return None
    for line in path.read_text().splitlines()[2:]:
        name, partition, offset = line.split()
        if (name, partition) == (topic, "0"):
            return int(offset)
    return None


@pytest.mark.parametrize("restart", ["clean", "sigkill"])
def test_retention_deletes_segments_below_and_restarts_keep_the_start(tmp_path: Path, restart: str):
    # The log start has a checkpoint schedule of its own (log.flush.start.offset.checkpoint.interval.ms).
    broker = BrokerProcess(tmp_path, {"log.retention.check.interval.ms": "200", "file.delete.delay.ms": "0",
                                      "log.flush.offset.checkpoint.interval.ms": "600000",
                                      "log.flush.start.offset.checkpoint.interval.ms": "200"}).start()
    try:
        topic = "dr-retention"
        create_topic(broker.bootstrap, topic, configs={"segment.bytes": "1024"})
        produce(broker.bootstrap, topic, count=300, **{"batch.num.messages": 10})
        root, log_dir = tmp_path / "logs", tmp_path / "logs" / f"{topic}-0"
        before = segment_bases(log_dir)
        assert len(before) > 5 and before[0] == 0
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        deleted = admin.delete_records([TopicPartition(topic, 0, 150)])
        assert [f.result(timeout=30).low_watermark for f in deleted.values()] == [150]
        # The next retention pass removes every segment wholly below 150 and keeps the one holding it.
        eventually(lambda: segment_bases(log_dir)[0] == max(b for b in before if b <= 150), "segments deleted")
        eventually(lambda: checkpointed_start(root, topic) == 150, "log-start-offset-checkpoint")
        if restart == "clean":
            broker.stop()
        else:
            broker.kill()
        broker.start()
        assert watermarks(broker.bootstrap, topic) == (150, 300)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "dr-after-restart",
                             "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe([topic])
            msg = consumer.poll(15)
            while msg is not None and msg.error() is not None:
                msg = consumer.poll(15)
            assert msg is not None and (msg.offset(), msg.value()) == (150, b"v150")
        finally:
            consumer.close()
    finally:
        broker.kill()
