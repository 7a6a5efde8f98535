"""`LogManager.move_strays` (Kafka's KRaft stray-log check at start-up): which logs are stray, in Kafka's words,
and what becomes of them: renamed ``<topic>-<partition>.<uuid>-stray`` with their future log, forgotten, their
files kept, skipped by the next start; a log with another topic id is refused INCONSISTENT_TOPIC_ID's error."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Sequence

import pytest

from logtest_util import NOW, batch
from pybroker.common.clock import SystemClock
from pybroker.common.ids import BrokerId
from pybroker.common.topic import TopicPartition, topic_id_to_string
from pybroker.log import LogConfig
from pybroker.log.checkpoint import PartitionMetadataFile
from pybroker.log.errors import InconsistentTopicIdError, LogError
from pybroker.log.log_dirs import STRAY_DIR_SUFFIX, parse_partition_dir_name, suffixed_dir_name
from pybroker.log.manager import LogManager
from pybroker.log.stray_logs import ReplicasOf
from pybroker.replication.manager import ReplicaManager

CONFIG = LogConfig()
OLD, NEW = uuid.uuid4(), uuid.uuid4()
BROKER = 0


def _metadata(topic_id: uuid.UUID, partitions: int, replicas: Sequence[int] = (BROKER,)) -> ReplicasOf:
    """``replicas_of`` for a metadata image holding one topic."""
    return lambda tid, p: tuple(replicas) if tid == topic_id and p < partitions else None


def _manager(roots: list[Path]) -> LogManager:
    logs = LogManager([str(root) for root in roots], CONFIG)
    logs.startup(NOW)
    return logs


def _dirs(root: Path) -> list[str]:
    return sorted(path.name for path in root.iterdir() if path.is_dir())


def test_logs_the_metadata_does_not_give_this_broker_are_moved_aside_and_kept(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    logs = _manager([tmp_path])
    for topic, partition, topic_id in (("kept", 0, NEW), ("old", 0, OLD), ("kept", 1, NEW)):
        log = logs.get_or_create_log(topic, partition, topic_id=topic_id)
        log.append_as_leader(batch(3), leader_epoch=0, now_ms=NOW)
    logs.get_or_create_log("noid", 0)
    logs.shutdown()

    logs = _manager([tmp_path])
    in_image = {NEW: {0: (BROKER,), 1: (BROKER,)}}  # "kept", 2 partitions; "old" was deleted
    moved = logs.move_strays(lambda tid, p: in_image.get(tid, {}).get(p), BROKER)
    assert [logs.get_log(t, p) is not None for t, p in (("kept", 0), ("kept", 1), ("old", 0), ("noid", 0))] == \
        [True, True, False, False]
    names = _dirs(tmp_path)
    strays = [name for name in names if name.endswith(STRAY_DIR_SUFFIX)]
    assert sorted(Path(path).name for path in moved) == strays
    assert sorted(name.split(".")[0] for name in strays) == ["noid-0", "old-0"]
    assert "kept-0" in names and "old-0" not in names and "noid-0" not in names
    old = next(tmp_path / name for name in strays if name.startswith("old-0."))
    assert (old / "00000000000000000000.log").stat().st_size > 0  # nothing of it is deleted
    messages = [record.getMessage() for record in caplog.records]
    assert f"Found stray log dir {tmp_path / 'old-0'}: the topicId {topic_id_to_string(OLD)} does not exist in " \
           "the metadata image." in messages
    assert f"The topicId does not exist in {tmp_path / 'noid-0'}, treat it as a stray log." in messages
    assert f"Log in {tmp_path / 'old-0'} marked stray and renamed to {old}" in messages
    logs.shutdown()

    caplog.clear()
    logs = _manager([tmp_path])
    assert logs.get_log("old", 0) is None and _dirs(tmp_path) == names  # skipped, not loaded, not removed
    assert f"Found stray log {old}: not loaded, kept for the operator to inspect and remove" in caplog.messages
    logs.shutdown()


@pytest.mark.parametrize("partitions, replicas, reason", [
    (1, (BROKER,), None),
    (1, (1, 2), "the current replica assignment [1, 2] does not contain the local brokerId 0."),
    (0, (BROKER,), "does not exist in the metadata image."),
])
def test_a_log_is_stray_when_the_partition_is_not_assigned_to_this_broker(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, partitions: int, replicas: tuple[int, ...],
        reason: str | None) -> None:
    logs = _manager([tmp_path])
    logs.get_or_create_log("t", 0, topic_id=NEW)
    assert len(logs.move_strays(_metadata(NEW, partitions, replicas), BROKER)) == (reason is not None)
    assert (logs.get_log("t", 0) is None) == (reason is not None)
    if reason is not None:
        assert any(message.endswith(reason) for message in caplog.messages)
    logs.shutdown()


def test_a_stray_log_moving_between_log_dirs_is_moved_aside_with_its_future_log(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    logs = _manager([first, second])
    logs.get_or_create_log("t", 0, topic_id=OLD).append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    future = logs.create_future_log("t", 0, str(second))
    assert future is not None
    logs.shutdown()

    logs = _manager([first, second])
    assert logs.future_log("t", 0) is not None
    assert len(logs.move_strays(_metadata(NEW, 1), BROKER)) == 2
    assert logs.get_log("t", 0) is None and logs.future_log("t", 0) is None
    assert [name.endswith(STRAY_DIR_SUFFIX) for name in _dirs(first) + _dirs(second)] == [True, True]
    logs.shutdown()


def test_a_log_recording_another_topic_id_is_refused(tmp_path: Path) -> None:
    logs = _manager([tmp_path])
    logs.get_or_create_log("t", 0, topic_id=OLD)
    with pytest.raises(InconsistentTopicIdError):
        logs.get_or_create_log("t", 0, topic_id=NEW)
    logs.shutdown()


def test_a_stray_directory_name_stays_within_255_characters() -> None:
    longest = "x" * 249
    name = suffixed_dir_name(TopicPartition(longest, 123), STRAY_DIR_SUFFIX)
    assert len(name) == 255 and name.endswith(f"-123.{name.split('.')[-1]}") and name.endswith("-stray")
    assert parse_partition_dir_name(name) is None
    assert suffixed_dir_name(TopicPartition("t", 0), STRAY_DIR_SUFFIX).startswith("t-0.")


def test_a_log_of_the_longest_topic_name_is_moved_aside_and_deleted(tmp_path: Path) -> None:
    """``<249 characters>-0.<32 hex>-delete`` is 291 characters: the rename failed ENAMETOOLONG before the
    names were cut as Kafka cuts them."""
    longest = "x" * 249
    logs = _manager([tmp_path])
    logs.get_or_create_log(longest, 0, topic_id=OLD)
    logs.get_or_create_log(longest, 1, topic_id=OLD)
    assert logs.delete_logs([TopicPartition(longest, 0)]) == 1
    assert len(logs.move_strays(_metadata(NEW, 2), BROKER)) == 1
    names = _dirs(tmp_path)
    assert len(names) == 1 and names[0].endswith("-1." + names[0].split(".")[-1]) and len(names[0]) == 255
    logs.shutdown()



def _two_copies(tmp_path: Path, first_id: uuid.UUID, second_id: uuid.UUID) -> tuple[Path, Path]:
    """A log of t-0 in each of two log dirs, with 1 and 2 records, recording the given topic ids."""
    first, second = tmp_path / "a", tmp_path / "b"
    for root, topic_id, records in ((first, first_id, 1), (second, second_id, 2)):
        logs = _manager([root])
        logs.get_or_create_log("t", 0, topic_id=topic_id).append_as_leader(batch(records), leader_epoch=0, now_ms=NOW)
        logs.shutdown()
    return first, second


@pytest.mark.parametrize("stray_in", ["a", "b"])
def test_a_stray_copy_of_a_partition_in_another_log_dir_is_moved_aside_not_taken_for_a_duplicate(
        tmp_path: Path, stray_in: str) -> None:
    first, second = _two_copies(tmp_path, *((OLD, NEW) if stray_in == "a" else (NEW, OLD)))
    logs = LogManager([str(first), str(second)], CONFIG)
    logs.startup(NOW, strays_checked=True)
    [moved] = logs.move_strays(_metadata(NEW, 1), BROKER)
    served = logs.get_log("t", 0)
    assert served is not None and served.topic_id == NEW
    assert served.log_end_offset == (2 if stray_in == "a" else 1)
    assert Path(moved).parent.name == stray_in and Path(moved).name.endswith(STRAY_DIR_SUFFIX)
    assert logs.log_dir_of("t", 0) == str(second if stray_in == "a" else first)
    logs.shutdown()


def test_two_copies_of_a_partition_neither_stray_are_refused(tmp_path: Path) -> None:
    first, second = _two_copies(tmp_path, NEW, NEW)
    logs = LogManager([str(first), str(second)], CONFIG)
    with pytest.raises(LogError, match="Duplicate log directories for t-0"):
        logs.startup(NOW)  # no stray check to come (a ZooKeeper-mode broker)
    logs = LogManager([str(first), str(second)], CONFIG)
    logs.startup(NOW, strays_checked=True)
    with pytest.raises(LogError, match="Duplicate log directories for t-0"):
        logs.move_strays(_metadata(NEW, 1), BROKER)
    assert _dirs(first) == ["t-0"] and _dirs(second) == ["t-0"]  # nothing moved


def test_a_leader_and_isr_s_topic_id_check_reads_no_file_after_start_up(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """ZooKeeper mode compares every LeaderAndIsr's topic id with the log's (`ReplicaManager.has_consistent_topic_id`):
    the id is read while the logs load, before anything is served, not on the loop at the first LeaderAndIsr."""
    logs = _manager([tmp_path])
    logs.get_or_create_log("t", 0, topic_id=OLD)
    logs.shutdown()
    logs = _manager([tmp_path])
    reads: list[str] = []
    read = PartitionMetadataFile.read

    def counted_read(self: PartitionMetadataFile) -> uuid.UUID | None:
        reads.append(self.path)
        return read(self)

    monkeypatch.setattr(PartitionMetadataFile, "read", counted_read)
    replicas = ReplicaManager(logs, BrokerId(BROKER), SystemClock())
    assert replicas.has_consistent_topic_id("t", 0, OLD) and not replicas.has_consistent_topic_id("t", 0, NEW)
    assert reads == []
    logs.shutdown()
