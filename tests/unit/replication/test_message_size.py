"""max.message.bytes is checked once per append, where Kafka checks it: every leader append (a produce, before
its records are walked; a coordinator's records; a transaction marker) is refused past the partition's limit,
and a follower's copy of the leader's log never is (Kafka's ``ignoreRecordSize`` for replication)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from pybroker.common.clock import ManualClock
from pybroker.log import LogConfig
from pybroker.log.manager import LogManager
from pybroker.records.batch import set_base_offset
from pybroker.records.errors import RecordTooLargeError
from pybroker.records.record import RecordInput, build_batch
from pybroker.replication.append_records import PartitionAppend, append_records
from pybroker.replication.manager import ReplicaManager
from tests.unit.replication.test_data_path import appended

NOW = 1_700_000_000_000
LIMIT = 1024
CONFIG = LogConfig(segment_bytes=1 << 20, max_message_bytes=LIMIT)


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager([str(tmp_path)], CONFIG)
    logs.startup(NOW)
    manager = ReplicaManager(logs, 0, ManualClock(wall_ms=NOW))
    manager.become_leader("t", 0, uuid.UUID(int=1), leader_epoch=0, replicas=(0,), isr=(0,), config=CONFIG,
                          min_insync_replicas=1)
    yield manager
    logs.shutdown()


def big_batch() -> bytearray:
    built = bytearray(build_batch([RecordInput(None, b"x" * (2 * LIMIT), timestamp=NOW)]))
    assert len(built) > LIMIT
    return built


def test_a_produce_past_the_limit_is_refused_before_its_records_are_walked(replicas: ReplicaManager) -> None:
    corrupt = big_batch()
    corrupt[-1] ^= 0xFF  # a bad record (and CRC) too: the size answers first, as Kafka's order has it
    [refused] = asyncio.run(appended(append_records(replicas, [PartitionAppend("t", 0, bytes(corrupt))],
                                                    required_acks=1, transactional_id=None, allow_zstd=True,
                                                    now_ms=NOW)))
    assert isinstance(refused.error, RecordTooLargeError)
    assert replicas.partition("t", 0).log.log_end_offset == 0


def test_a_coordinators_append_past_the_limit_is_refused(replicas: ReplicaManager) -> None:
    with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
        replicas.append("t", 0, big_batch(), required_acks=-1, now_ms=NOW)
    assert replicas.partition("t", 0).log.log_end_offset == 0
    small = bytearray(build_batch([RecordInput(None, b"ok", timestamp=NOW)]))
    assert replicas.append("t", 0, small, required_acks=-1, now_ms=NOW).first_offset == 0


def test_a_followers_copy_is_never_refused_for_its_size(replicas: ReplicaManager) -> None:
    """The leader took the batch under a larger limit (the topic's config changed since): the follower keeps it."""
    copied = big_batch()
    set_base_offset(copied, 0, 0)
    log = replicas.partition("t", 0).log
    info = log.append_as_follower(bytes(copied), now_ms=NOW)
    assert (info.first_offset, log.log_end_offset) == (0, 1)
