"""JBOD: a broker with two log dirs places partitions, describes its dirs (DescribeLogDirs) to kafka-python,
raw requests of every version and `pybroker log-dirs --describe`, as Kafka's kafka-log-dirs.sh prints them,
and moves a replica between them (AlterReplicaLogDirs) under produce load without losing a record.

The broker copies moving replicas at 4 MB/s (replica.alter.log.dirs.io.max.bytes.per.second), so a move of
~8 MB lasts about two seconds and its `-future` log can be seen."""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kafka import KafkaAdminClient, KafkaProducer, TopicPartitionReplica
from kafka.admin import NewTopic
from kafka.errors import LogDirNotFoundError, NoError, ReplicaNotAvailableError

from pybroker.client.connection import Connection
from pybroker.protocol.messages import DescribeLogDirsRequest, DescribeLogDirsResponse
from tests.eventually import eventually
from tests.integration.broker_process import REPO, BrokerProcess

TOPIC = "jbod"
OTHER = "jbod-other"
MOVED = "moved"
COPY_RATE = 4_000_000


@pytest.fixture(scope="module")
def jbod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, list[str]]]:
    base = tmp_path_factory.mktemp("jbod")
    dirs = [str(base / "disk-a"), str(base / "disk-b")]
    process = BrokerProcess(base, {"log.dirs": ",".join(dirs),
                                   "replica.alter.log.dirs.io.max.bytes.per.second": str(COPY_RATE)}).start()
    admin = KafkaAdminClient(bootstrap_servers=process.bootstrap)
    try:
        admin.create_topics([NewTopic(TOPIC, 3, 1), NewTopic(OTHER, 1, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=process.bootstrap)
    for i in range(30):
        producer.send(TOPIC, value=b"x" * 100, partition=i % 3)
    producer.flush(timeout=30)
    producer.close()
    yield process, dirs
    process.kill()


def describe(process: BrokerProcess, request: DescribeLogDirsRequest, version: int) -> DescribeLogDirsResponse:
    async def go() -> DescribeLogDirsResponse:
        host, port = process.bootstrap.split(":")
        connection = await Connection.open(host, int(port))
        try:
            return await connection.send_at(request, version, DescribeLogDirsResponse)
        finally:
            await connection.close()
    return asyncio.run(go())


def placement(dirs: list[str]) -> dict[str, list[str]]:
    return {d: sorted(name for name in os.listdir(d) if name.startswith("jbod")) for d in dirs}


def test_new_partitions_go_to_the_dir_with_the_fewest_partitions_first_on_a_tie(jbod):
    _, dirs = jbod
    # jbod-0 -> a, jbod-1 -> b, jbod-2 -> a (tie: the first), jbod-other-0 -> b
    assert placement(dirs) == {dirs[0]: ["jbod-0", "jbod-2"], dirs[1]: ["jbod-1", "jbod-other-0"]}


def test_kafka_python_describe_log_dirs_reports_sizes_lags_and_the_volume(jbod):
    process, dirs = jbod
    admin = KafkaAdminClient(bootstrap_servers=process.bootstrap)
    try:
        [answer] = admin.describe_log_dirs()
    finally:
        admin.close()
    assert answer["broker"] == 0
    by_dir = {d["log_dir"]: d for d in answer["log_dirs"]}
    assert list(by_dir) == dirs
    sizes = {}
    for log_dir in by_dir.values():
        assert log_dir["error_code"] == 0
        assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
        for topic in log_dir["topics"]:
            for p in topic["partitions"]:
                assert (p["offset_lag"], p["is_future_key"]) == (0, False)
                sizes[(log_dir["log_dir"], topic["name"], p["partition_index"])] = p["partition_size"]
    on_disk = {key: sum(f.stat().st_size for f in Path(key[0], f"{key[1]}-{key[2]}").glob("*.log"))
               for key in sizes}
    assert sizes == on_disk
    assert sizes[(dirs[0], TOPIC, 0)] > 0 and sizes[(dirs[1], OTHER, 0)] == 0


@pytest.mark.parametrize("version", range(1, 5))
def test_every_version_filters_by_topic_partitions(jbod, version):
    process, dirs = jbod
    asked = DescribeLogDirsRequest(topics=[DescribeLogDirsRequest.DescribableLogDirTopic(topic=TOPIC, partitions=[1, 2]),
                                           DescribeLogDirsRequest.DescribableLogDirTopic(topic="absent", partitions=[0])])
    response = describe(process, asked, version)
    assert response.error_code == 0
    assert [(r.log_dir, r.error_code, [(t.name, [p.partition_index for p in t.partitions]) for t in r.topics])
            for r in response.results] == [(dirs[0], 0, [(TOPIC, [2])]), (dirs[1], 0, [(TOPIC, [1])])]
    volumes = [(r.total_bytes > 0, r.usable_bytes > 0) for r in response.results]
    assert volumes == ([(True, True)] * 2 if version >= 4 else [(False, False)] * 2)
    nothing = describe(process, DescribeLogDirsRequest(topics=[]), version)
    assert [(r.log_dir, r.topics) for r in nothing.results] == [(dirs[0], []), (dirs[1], [])]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pybroker", "log-dirs", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=60)


def test_cli_prints_kafka_log_dirs_json(jbod):
    process, dirs = jbod
    done = run_cli("--describe", "--bootstrap-server", process.bootstrap, "--topic-list", OTHER)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["Querying brokers for log directories information",
                         "Received log directory information from brokers 0"]
    assert len(lines) == 3
    document = json.loads(lines[2])
    assert list(document) == ["brokers", "version"] and document["version"] == 1
    [broker] = document["brokers"]
    assert list(broker) == ["broker", "logDirs"] and broker["broker"] == 0
    assert sorted(d["logDir"] for d in broker["logDirs"]) == sorted(dirs)
    for log_dir in broker["logDirs"]:
        assert list(log_dir) == ["partitions", "error", "logDir"] and log_dir["error"] is None
    by_dir = {d["logDir"]: d["partitions"] for d in broker["logDirs"]}
    assert by_dir == {dirs[0]: [], dirs[1]: [{"partition": f"{OTHER}-0", "size": 0, "offsetLag": 0,
                                               "isFuture": False}]}


def test_cli_refuses_brokers_not_in_the_cluster(jbod):
    process, _ = jbod
    done = run_cli("--describe", "--bootstrap-server", process.bootstrap, "--broker-list", "0,7")
    assert done.returncode == 1
    assert done.stderr.strip() == ("ERROR: The given brokers do not exist from --broker-list: 7. "
                                   "Current existent brokers: 0")
    assert done.stdout == ""




def replicas(process: BrokerProcess, topic: str) -> dict[str, list[tuple[int, bool, int]]]:
    """log dir -> [(partition, is_future, offset lag)] of `topic`."""
    response = describe(process, DescribeLogDirsRequest(topics=None), 4)
    return {r.log_dir: [(p.partition_index, p.is_future_key, p.offset_lag) for t in r.topics if t.name == topic
                        for p in t.partitions] for r in response.results}


def test_a_replica_moves_to_the_other_dir_under_produce_load_without_losing_records(jbod, tmp_path):
    process, dirs = jbod
    admin = KafkaAdminClient(bootstrap_servers=process.bootstrap)
    try:
        admin.create_topics([NewTopic(MOVED, 1, 1, topic_configs={"file.delete.delay.ms": "0"})])
        [source] = [d for d in dirs if os.path.isdir(os.path.join(d, f"{MOVED}-0"))]
        [target] = [d for d in dirs if d != source]
        delivered: list[bytes] = []
        producer = Producer({"bootstrap.servers": process.bootstrap, "acks": "all", "linger.ms": 5})

        def acknowledged(err, msg):  # type: ignore[no-untyped-def]
            if err is None:
                delivered.append(msg.value())

        for i in range(8000):  # ~8 MB before the move
            producer.produce(MOVED, value=b"%06d" % i + b"." * 1000, on_delivery=acknowledged)
            producer.poll(0)
        producer.flush(30)
        stop = threading.Event()

        def keep_producing() -> None:
            i = 8000
            while not stop.is_set():
                producer.produce(MOVED, value=b"%06d" % i, on_delivery=acknowledged)
                producer.poll(0.002)
                i += 1
            producer.flush(30)

        load = threading.Thread(target=keep_producing)
        load.start()
        try:
            answer = admin.alter_replica_log_dirs({TopicPartitionReplica(MOVED, 0, 0): target})
            assert answer == {TopicPartitionReplica(MOVED, 0, 0): NoError}
            moving = eventually(lambda: [p for p in replicas(process, MOVED)[target] if p[1]], "a future replica in the target dir")
            assert moving[0][0] == 0 and moving[0][2] > 0  # the future log lags the current one
            assert [(p, f) for p, f, _ in replicas(process, MOVED)[source]] == [(0, False)]
            assert [n for n in os.listdir(target) if n.startswith(MOVED)] and \
                all(re.fullmatch(rf"{MOVED}-0\.[0-9a-f]{{32}}-future", n)
                    for n in os.listdir(target) if n.startswith(MOVED))
            eventually(lambda: replicas(process, MOVED) == {target: [(0, False, 0)], source: []}, "the move to finish")
            after_move = len(delivered)
            eventually(lambda: len(delivered) > after_move + 200, "200 appends to the moved replica")
        finally:
            stop.set()
            load.join(60)
        eventually(lambda: not [n for n in os.listdir(source) if n.startswith(MOVED)], "the old copy's removal")
        assert len(delivered) > 8000
        assert consume_all(process, len(delivered)) == delivered
        assert process.stop() == 0
        process.start()
        assert consume_all(process, len(delivered)) == delivered
        assert replicas(process, MOVED) == {target: [(0, False, 0)], source: []}
    finally:
        admin.close()


def consume_all(process: BrokerProcess, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": process.bootstrap, "group.id": f"moved-{time.monotonic()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(MOVED, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    errors = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < count and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=0.5):
                if message.error() is None:
                    values.append(message.value())
                else:
                    errors.append(message.error())
    finally:
        consumer.close()
    assert len(values) >= count, (len(values), errors[:5])
    return values


def test_alter_replica_log_dirs_refusals(jbod):
    process, dirs = jbod
    admin = KafkaAdminClient(bootstrap_servers=process.bootstrap)
    try:
        answer = admin.alter_replica_log_dirs({
            TopicPartitionReplica(OTHER, 0, 0): "/not/a/log/dir",
            TopicPartitionReplica("absent", 0, 0): dirs[0],
            TopicPartitionReplica(TOPIC, 0, 0): dirs[0],  # already there: nothing to do
        })
    finally:
        admin.close()
    assert answer == {TopicPartitionReplica(OTHER, 0, 0): LogDirNotFoundError,
                      TopicPartitionReplica("absent", 0, 0): ReplicaNotAvailableError,
                      TopicPartitionReplica(TOPIC, 0, 0): NoError}


def reassign(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pybroker", "reassign-partitions", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=60)


def test_reassign_partitions_moves_replicas_between_log_dirs(jbod, tmp_path):
    process, dirs = jbod
    admin = KafkaAdminClient(bootstrap_servers=process.bootstrap)
    try:
        admin.create_topics([NewTopic("relocated", 1, 1)])
    finally:
        admin.close()
    [source] = [d for d in dirs if os.path.isdir(os.path.join(d, "relocated-0"))]
    [target] = [d for d in dirs if d != source]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "relocated", "partition": 0, "replicas": [0], "log_dirs": [target]}]}))
    executed = reassign("--bootstrap-server", process.bootstrap, "--execute", "--reassignment-json-file", str(plan))
    assert executed.returncode == 0, executed.stdout + executed.stderr
    assert executed.stdout.splitlines()[-2:] == [
        "Successfully started partition reassignment for relocated-0",
        f"Successfully started moving log directory to {target} for replica relocated-0 with broker 0 "]

    def verified() -> list[str]:
        done = reassign("--bootstrap-server", process.bootstrap, "--verify", "--reassignment-json-file", str(plan))
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.splitlines()

    eventually(lambda: verified() == ["Status of partition reassignment:",
                                      "Reassignment of partition relocated-0 is completed.",
                                      "Reassignment of replica relocated-0-0 completed successfully."],
               "the reassignment's --verify to report it completed")
    assert replicas(process, "relocated") == {target: [(0, False, 0)], source: []}
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "relocated", "partition": 0, "replicas": [0], "log_dirs": ["any", target]}]}))
    refused = reassign("--bootstrap-server", process.bootstrap, "--execute", "--reassignment-json-file", str(plan))
    assert refused.returncode == 1
    assert "Size of replicas list [0] is different from size of log dirs list" in refused.stderr + refused.stdout


def test_a_move_interrupted_by_a_restart_resumes(jbod):
    process, dirs = jbod
    admin = KafkaAdminClient(bootstrap_servers=process.bootstrap)
    try:
        admin.create_topics([NewTopic("resumed", 1, 1, topic_configs={"file.delete.delay.ms": "0"})])
        [source] = [d for d in dirs if os.path.isdir(os.path.join(d, "resumed-0"))]
        [target] = [d for d in dirs if d != source]
        producer = Producer({"bootstrap.servers": process.bootstrap, "acks": "all", "linger.ms": 5})
        values = [b"%06d" % i + b"." * 1000 for i in range(12000)]  # ~12 MB: about 3 s at COPY_RATE
        for value in values:
            producer.produce("resumed", value=value)
            producer.poll(0)
        assert producer.flush(30) == 0
        assert admin.alter_replica_log_dirs({TopicPartitionReplica("resumed", 0, 0): target}) == \
            {TopicPartitionReplica("resumed", 0, 0): NoError}
    finally:
        admin.close()
    eventually(lambda: [p for p in replicas(process, "resumed")[target] if p[1]], "the resumed future replica")
    assert process.stop() == 0
    assert [n for n in os.listdir(target) if n.startswith("resumed-0.") and n.endswith("-future")]
    process.start()
    assert process.wait_for_log(r"Loaded future log of resumed-0 in .*: its move resumes")
    eventually(lambda: replicas(process, "resumed") == {target: [(0, False, 0)], source: []}, "the resumed move to finish")
    consumer = Consumer({"bootstrap.servers": process.bootstrap, "group.id": "resumed",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("resumed", 0, OFFSET_BEGINNING)])
    read: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(read) < len(values) and time.monotonic() < deadline:
            read += [m.value() for m in consumer.consume(1000, timeout=0.5) if m.error() is None]
    finally:
        consumer.close()
    assert read == values
