"""A ZooKeeper-mode broker announces a failed log dir to the controller as Kafka's brokers do: a persistent
sequential znode /log_dir_event_notification/log_dir_event_<seq> holding {"version":1,"broker":<id>,"event":1}.
The failing dir is the small tmpfs of test_log_dir_failure (skipped where it cannot be mounted)."""

from __future__ import annotations

import json
from pathlib import Path

from kazoo.client import KazooClient

from pybroker.protocol.error_codes import ErrorCode
from tests.cluster.conftest import CHROOT, broker_overrides
from tests.cluster.zookeeper import ZooKeeperServer
from tests.integration.broker_process import BrokerProcess
from tests.integration.groups_common import wait_until
from tests.integration.test_bad_input import WireClient
from tests.integration.test_log_dir_failure import TOPIC, create, fill, produce, small_dir  # noqa: F401 (fixture)


def test_a_failed_log_dir_writes_kafkas_log_dir_event_notification(tmp_path: Path, small_dir: Path) -> None:
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper").start()
    broker = BrokerProcess(tmp_path, {**broker_overrides(0, zookeeper.connect + CHROOT),
                                      "log.dirs": f"{tmp_path / 'disk-a'},{small_dir}"})
    zk = KazooClient(zookeeper.connect + CHROOT)
    try:
        broker.start()
        client = WireClient(broker.bootstrap)
        create(client, TOPIC, 2)  # partition 1 lands in the tmpfs
        wait_until(lambda: produce(client, 1) == 0, "the partition to take records")
        fill(small_dir)
        assert produce(client, 1) == ErrorCode.KAFKA_STORAGE_ERROR
        client.close()
        zk.start(timeout=10)
        wait_until(lambda: zk.exists("/log_dir_event_notification") and
                   zk.get_children("/log_dir_event_notification"), "the log dir event")
        [name] = zk.get_children("/log_dir_event_notification")
        assert name.startswith("log_dir_event_") and name[len("log_dir_event_"):].isdigit()
        data, _ = zk.get(f"/log_dir_event_notification/{name}")
        assert json.loads(data) == {"version": 1, "broker": 0, "event": 1}
    finally:
        zk.stop()
        broker.kill()
        zookeeper.stop()
