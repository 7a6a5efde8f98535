"""Client-metrics subscriptions in ZooKeeper mode: altered through one broker, stored at
/config/client-metrics/<name> as entity-config JSON with a /config/changes notification, and answered by
every broker (another broker's GetTelemetrySubscriptions sees the new subscription, its removal too)."""

from __future__ import annotations

import json
import uuid

from kazoo.client import KazooClient

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import GetTelemetrySubscriptionsRequest, GetTelemetrySubscriptionsResponse
from tests.eventually import eventually
from tests.cluster.conftest import CHROOT, running_cluster
from tests.integration.test_bad_input import WireClient
from tests.integration.test_client_telemetry import alter


def requested_metrics(bootstrap: str) -> list[str] | None:
    """What a brand-new client instance is asked to push by this broker."""
    client = WireClient(bootstrap)
    try:
        answer = client.request(GetTelemetrySubscriptionsRequest(client_instance_id=uuid.UUID(int=0)), 0,
                                GetTelemetrySubscriptionsResponse)
    finally:
        client.close()
    return list(answer.requested_metrics) if answer.error_code == ErrorCode.NONE else None


def test_subscription_is_stored_in_zookeeper_and_seen_by_every_broker(tmp_path) -> None:
    with running_cluster(tmp_path, brokers=2) as cluster:
        first, second = cluster.brokers
        assert requested_metrics(second.bootstrap) == []
        wire = WireClient(first.bootstrap)
        try:
            assert alter(wire, "zk sub", {"metrics": "org.apache.kafka.", "interval.ms": "1000"}) == (ErrorCode.NONE,
                                                                                                      None)
            zk = KazooClient(hosts=cluster.zookeeper.connect)
            zk.start()
            try:
                data, _ = zk.get(CHROOT + "/config/client-metrics/zk%20sub")
                assert json.loads(data) == {"version": 1, "config": {"metrics": "org.apache.kafka.",
                                                                      "interval.ms": "1000"}}
                changes = [json.loads(zk.get(f"{CHROOT}/config/changes/{c}")[0])
                           for c in zk.get_children(CHROOT + "/config/changes")]
                assert {"version": 2, "entity_path": "client-metrics/zk%20sub"} in changes
            finally:
                zk.stop()
            eventually(lambda: requested_metrics(second.bootstrap) == ["org.apache.kafka."],
                       "the other broker to serve the new subscription")
            assert alter(wire, "zk sub", {"metrics": None, "interval.ms": None}) == (ErrorCode.NONE, None)
            eventually(lambda: requested_metrics(second.bootstrap) == [], "the other broker to drop the subscription")
        finally:
            wire.close()
