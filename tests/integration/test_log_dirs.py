"""JBOD: a broker with two log dirs places partitions, describes its dirs (DescribeLogDirs) to kafka-python,
raw requests of every version and `pybroker log-dirs --describe`, as Kafka's kafka-log-dirs.sh prints them."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from pybroker.client.connection import Connection
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import DescribeLogDirsRequest, DescribeLogDirsResponse
from tests.integration.broker_process import REPO, BrokerProcess

TOPIC = "jbod"
OTHER = "jbod-other"


@pytest.fixture(scope="module")
def jbod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, list[str]]]:
    base = tmp_path_factory.mktemp("jbod")
    dirs = [str(base / "disk-a"), str(base / "disk-b")]
    process = BrokerProcess(base, {"log.dirs": ",".join(dirs)}).start()
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


@pytest.mark.parametrize("version", range(5))
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
