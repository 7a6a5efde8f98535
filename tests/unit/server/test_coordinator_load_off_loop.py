"""A coordinator load decodes its partition's records on a pybroker-io thread and applies them on the
loop: replaying a large ``__consumer_offsets`` partition must not hold the event loop for its whole
length. Which thread decodes is observed with a profile hook on ``decode_record`` calls."""

from __future__ import annotations

import asyncio
import sys
import threading
from types import SimpleNamespace
from typing import Any

from pybroker.common.clock import ManualClock
from pybroker.common.config import BrokerConfig
from pybroker.common.io_executor import IO_THREAD_PREFIX, IoExecutor
from pybroker.coordinator.group import CommittedOffset
from pybroker.coordinator.records import decode_record, offset_record
from pybroker.log import PartitionLog
from pybroker.log.config import LogConfig
from pybroker.records.record import RecordInput, build_batch
from pybroker.server.group_service import OFFSETS_TOPIC, GroupService

NOW = 1_700_000_000_000


def _offsets_log(tmp_path: Any, commits: int) -> PartitionLog:
    log = PartitionLog.open(str(tmp_path), OFFSETS_TOPIC, 0, LogConfig(), now_ms=NOW)
    for i in range(commits):
        key, value = offset_record(f"group-{i % 7}", "orders", i % 3, CommittedOffset(i, 0, "", NOW))
        log.append_as_leader(bytearray(build_batch([RecordInput(key, value, timestamp=NOW)])), leader_epoch=0,
                             now_ms=NOW)
    log.set_high_watermark(log.log_end_offset)
    return log


def test_offsets_are_decoded_on_an_io_thread_and_applied(tmp_path: Any) -> None:
    log = _offsets_log(tmp_path, 300)
    decoding_threads: set[str] = set()

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is decode_record.__code__:
            decoding_threads.add(threading.current_thread().name)

    async def scenario() -> GroupService:
        io = IoExecutor(1)
        logs = SimpleNamespace(get_log=lambda topic, partition: log)
        service = GroupService(BrokerConfig({"offsets.topic.num.partitions": "1"}), lambda: None,  # type: ignore
                               None, logs, io, ManualClock(wall_ms=NOW))  # type: ignore[arg-type]
        threading.setprofile(hook)
        sys.setprofile(hook)
        try:
            service.on_leadership_change(OFFSETS_TOPIC, 0, 0, True)
            await service.partitions.loading.wait()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
            io.shutdown()
        return service

    service = asyncio.run(scenario())
    log.close()
    assert service.partitions.loaded == {0}
    assert decoding_threads and all(name.startswith(IO_THREAD_PREFIX) for name in decoding_threads), decoding_threads
    committed = service.coordinator.groups["group-0"].offsets[("orders", 0)]
    assert committed.offset == 294  # the last of i = 0, 21, 42, ... (i % 7 == 0 and i % 3 == 0)
