"""A single node that finds a log whose topic id its metadata does not hold moves it aside as
``<topic>-<partition>.<uuid>-stray`` at start-up, as Kafka's KRaft brokers do, serves the topic from a fresh
log and keeps the old files for the operator.

The log comes back as a crash brings it back: a deletion renames the directory ``-delete`` and the crash undoes
the rename (here: the directory copied while the broker was stopped is put back in place). Before this change
the broker answered CreateTopics of the topic again KAFKA_STORAGE_ERROR ("Topic id ... differs from the recorded
id") when the topic was deleted, and exited at start-up with that error when it had been created again."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from pybroker.log.checkpoint import PartitionMetadataFile
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ProduceResponse
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_confluent_kafka import consume_all
from tests.integration.test_topic_creation_off_loop import _produce
from tests.integration.test_topic_deletion_off_loop import _create, _delete_answer, _send_delete

TOPIC = "reborn"


def _started(broker: BrokerProcess) -> WireClient:
    broker.start()
    assert broker.process is not None and broker.process.poll() is None, "\n".join(broker.log_lines[-30:])
    return WireClient(broker.bootstrap)


def _produced(client: WireClient) -> ProduceResponse.PartitionProduceResponse:
    """One record produced once the partition is served (a log made at start-up answers NOT_LEADER_OR_FOLLOWER
    until it exists, which a client retries)."""
    return eventually(lambda: (a := _produce(client, TOPIC, 0)).error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER and a,
                      f"{TOPIC}-0 to be served")


def _three_records_then_stop(broker: BrokerProcess, client: WireClient) -> None:
    _create(client, TOPIC, 1)
    for _ in range(3):
        assert _produce(client, TOPIC, 0).error_code == ErrorCode.NONE
    client.close()
    broker.stop()


def _strays(logs: Path) -> list[Path]:
    return sorted(path for path in logs.iterdir() if path.name.startswith(f"{TOPIC}-0.") and
                  path.name.endswith("-stray"))


@pytest.mark.parametrize("then", ["deleted", "created again"])
def test_an_old_log_brought_back_by_a_crash_is_moved_aside_and_the_topic_served_afresh(tmp_path: Path,
                                                                                       then: str) -> None:
    broker = BrokerProcess(tmp_path)
    logs = tmp_path / "logs"
    client = _started(broker)
    try:
        _three_records_then_stop(broker, client)
        old_id = PartitionMetadataFile(str(logs / f"{TOPIC}-0" / "partition.metadata")).read()
        shutil.copytree(logs / f"{TOPIC}-0", tmp_path / "old")

        client = _started(broker)
        _send_delete(client, TOPIC)
        assert _delete_answer(client).error_code == ErrorCode.NONE
        if then == "created again":
            _create(client, TOPIC, 1)
        client.close()
        broker.stop()
        shutil.rmtree(logs / f"{TOPIC}-0", ignore_errors=True)
        shutil.copytree(tmp_path / "old", logs / f"{TOPIC}-0")  # the crash undid the -delete rename

        seen = len(broker.log_lines)
        client = _started(broker)
        if then == "deleted":
            _create(client, TOPIC, 1)
        answer = _produced(client)
        assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, 0)  # a fresh log, not the old one's 3
        assert [r.offset for r in consume_all(broker.bootstrap, TOPIC, 1, partitions=1)] == [0]
        [stray] = _strays(logs)
        assert PartitionMetadataFile(str(stray / "partition.metadata")).read() == old_id
        assert (stray / "00000000000000000000.log").stat().st_size > 0  # the old records are kept
        marked = [line for line in broker.log_lines[seen:] if " WARN Log in " in line]
        assert marked and marked[0].endswith(f"Log in {logs / TOPIC}-0 marked stray and renamed to {stray} "
                                             "(pybroker.log)")
        client.close()

        broker.stop()
        seen = len(broker.log_lines)
        client = _started(broker)
        assert _strays(logs) == [stray]  # never deleted, and not loaded again
        assert any(f"Found stray log {stray}: not loaded" in line for line in broker.log_lines[seen:])
        answer = _produced(client)
        assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, 1)
    finally:
        client.close()
        broker.stop()


def test_a_stray_copy_of_a_partition_in_a_second_log_dir_is_moved_aside_before_the_duplicate_check(
        tmp_path: Path) -> None:
    """Two log dirs; an old copy of the partition (another topic id: an earlier topic of the name) lies in the
    dir that does not serve it. Before this change the broker exited at start-up: "Duplicate log directories"."""
    dirs = [tmp_path / "logs-a", tmp_path / "logs-b"]
    broker = BrokerProcess(tmp_path, {"log.dirs": ",".join(map(str, dirs))})
    client = _started(broker)
    try:
        _three_records_then_stop(broker, client)
        [served] = [root for root in dirs if (root / f"{TOPIC}-0").is_dir()]
        [other] = [root for root in dirs if root != served]
        shutil.copytree(served / f"{TOPIC}-0", other / f"{TOPIC}-0")
        PartitionMetadataFile(str(other / f"{TOPIC}-0" / "partition.metadata")).write(uuid.uuid4())

        client = _started(broker)
        answer = _produced(client)
        assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, 3)  # the log served before
        assert not (other / f"{TOPIC}-0").exists() and len(_strays(other)) == 1 and _strays(served) == []
    finally:
        client.close()
        broker.stop()
