"""A failed log dir announced to the controller through ZooKeeper, as Kafka's brokers do
(ReplicaManager.handleLogDirFailure -> KafkaZkClient.propagateLogDirEvent).

The broker creates the persistent sequential znode ``/log_dir_event_notification/log_dir_event_<seq>``
holding ``{"version":1,"broker":<id>,"event":1}`` (1: LogDirFailure). The controller (Kafka's, and
pybroker's controller/log_dir_failure.py) deletes the notifications, sends LeaderAndIsr for every replica
on the broker, marks offline those the broker answers with KAFKA_STORAGE_ERROR and elects other leaders.
"""

from __future__ import annotations

import asyncio
import json
import logging

from kazoo.exceptions import KazooException

from pybroker.common.topic import TopicPartition
from pybroker.zk.client import ZkClient

log = logging.getLogger("pybroker.server")

LOG_DIR_EVENTS = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
LOG_DIR_FAILURE = 1


def encode_log_dir_event(broker_id: int, event: int = LOG_DIR_FAILURE) -> bytes:
    return json.dumps({"version": 1, "broker": broker_id, "event": event}, separators=(",", ":")).encode()


class LogDirEventAnnouncer:
    """A LogManager dir-failure listener that writes the notification znode (on the running loop)."""

    def __init__(self, zk: ZkClient, broker_id: int) -> None:
        self._zk = zk
        self._broker_id = broker_id
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, root: str, partitions: list[TopicPartition]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            log.error("Cannot announce the failure of log dir %s to the controller: no event loop", root)
            return
        task = loop.create_task(self._announce(root), name="log-dir-event")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _announce(self, root: str) -> None:
        try:
            path = await self._zk.create(f"{LOG_DIR_EVENTS}/{LOG_DIR_EVENT_PREFIX}",
                                         encode_log_dir_event(self._broker_id), sequence=True, makepath=True)
        except (KazooException, OSError) as exc:
            log.error("Cannot announce the failure of log dir %s to the controller: %s", root, exc)
            return
        log.info("Announced the failure of log dir %s to the controller (%s)", root, path)
