"""A log dir whose I/O fails goes offline, and the broker keeps serving the partitions of its other dirs, as
Kafka's log-dir failure handling (KIP-112) does on a broker.

The failing dir is a small tmpfs (this needs root and `mount`; the test is skipped without them) filled up
by a file beside the partitions, so the next append there fails with ENOSPC: that partition answers
KAFKA_STORAGE_ERROR from then on (Produce and Fetch), DescribeLogDirs and `pybroker log-dirs` report the
dir with KAFKA_STORAGE_ERROR, new partitions and replica moves avoid it, and freeing space does not bring
it back before a restart (Kafka's offline dirs come back only with the broker).
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybroker.admin import log_dirs as log_dirs_tool
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    FetchRequest,
    FetchResponse,
    ProduceRequest,
    ProduceResponse,
)
from pybroker.records.record import RecordInput, build_batch
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.tmpfs import mounted_tmpfs

TOPIC = "failing"


@pytest.fixture
def small_dir(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk-b", "size=2m") as mount_point:
        yield mount_point


def fill(directory: Path) -> Path:
    """Use up the tmpfs with one file beside the partitions."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


def create(client: WireClient, name: str, partitions: int) -> None:
    created = client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)]), 7, CreateTopicsResponse)
    assert created.topics[0].error_code == 0


def produce(client: WireClient, partition: int) -> int:
    records = bytes(build_batch([RecordInput(b"k", bytes(range(256)) * 40)]))  # 10 KB: new tmpfs pages
    request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=records)])])
    return client.request(request, 9, ProduceResponse).responses[0].partition_responses[0].error_code


def fetch(client: WireClient, partition: int) -> tuple[int, int]:
    """(error code, bytes of records) of a fetch from offset 0."""
    request = FetchRequest(max_wait_ms=0, min_bytes=0, topics=[FetchRequest.FetchTopic(
        topic=TOPIC, partitions=[FetchRequest.FetchPartition(partition=partition, fetch_offset=0,
                                                              partition_max_bytes=65536)])])
    data = client.request(request, 11, FetchResponse).responses[0].partitions[0]
    return data.error_code, len(bytes(data.records or b""))


def log_dirs(client: WireClient) -> dict[str, tuple[int, list[str]]]:
    response = client.request(DescribeLogDirsRequest(topics=None), 4, DescribeLogDirsResponse)
    return {r.log_dir: (r.error_code, [f"{t.name}-{p.partition_index}" for t in r.topics for p in t.partitions])
            for r in response.results}


def test_a_failed_log_dir_goes_offline_and_the_other_keeps_serving(tmp_path: Path, small_dir: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    good = str(tmp_path / "disk-a")
    bad = str(small_dir)
    broker = BrokerProcess(tmp_path, {"log.dirs": f"{good},{bad}"}).start()
    try:
        client = WireClient(broker.bootstrap)
        create(client, TOPIC, 2)  # partition 0 in disk-a, partition 1 in disk-b
        assert log_dirs(client) == {good: (0, [f"{TOPIC}-0"]), bad: (0, [f"{TOPIC}-1"])}
        assert (produce(client, 0), produce(client, 1)) == (0, 0)
        filler = fill(small_dir)

        assert produce(client, 1) == ErrorCode.KAFKA_STORAGE_ERROR  # ENOSPC: the dir goes offline
        assert broker.wait_for_log(rf"Stopping serving logs in dir {bad}")
        assert broker.wait_for_log(rf"Partitions {TOPIC}-1 are offline: their log dir {bad} failed")
        assert produce(client, 1) == ErrorCode.KAFKA_STORAGE_ERROR
        assert fetch(client, 1)[0] == ErrorCode.KAFKA_STORAGE_ERROR
        assert produce(client, 0) == 0
        error, size = fetch(client, 0)
        assert error == 0 and size > 0
        assert log_dirs(client) == {good: (0, [f"{TOPIC}-0"]), bad: (ErrorCode.KAFKA_STORAGE_ERROR, [])}

        filler.unlink()  # space again, but the dir stays offline until a restart, as in Kafka
        assert produce(client, 1) == ErrorCode.KAFKA_STORAGE_ERROR
        create(client, "after-failure", 2)
        assert log_dirs(client)[good][1] == ["after-failure-0", "after-failure-1", f"{TOPIC}-0"]
        move = AlterReplicaLogDirsRequest(dirs=[AlterReplicaLogDirsRequest.AlterReplicaLogDir(
            path=bad, topics=[AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(name=TOPIC, partitions=[0])])])
        moved = client.request(move, 2, AlterReplicaLogDirsResponse)
        assert moved.results[0].partitions[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
        client.close()

        assert log_dirs_tool.main(["--describe", "--bootstrap-server", broker.bootstrap]) == 0
        printed = capsys.readouterr().out.splitlines()
        dirs = {d["logDir"]: d for d in json.loads(printed[2])["brokers"][0]["logDirs"]}
        assert (dirs[bad]["error"], dirs[bad]["partitions"]) == ("org.apache.kafka.common.errors.KafkaStorageException",
                                                                 [])
        assert dirs[good]["error"] is None

        assert broker.stop() == 0  # a clean stop with a dir offline
        broker.start()
        client = WireClient(broker.bootstrap)
        assert log_dirs(client)[bad] == (0, [f"{TOPIC}-1"])  # back after the restart, with what it held
        error, size = fetch(client, 1)
        assert error == 0 and size > 0
        assert produce(client, 1) == 0
        client.close()
    finally:
        broker.kill()
