"""Three ZooKeeper-mode brokers with an authorizer: an ACL created through one broker (stored under
/kafka-acl with a /kafka-acl-changes notification) is enforced by every broker for a SASL PLAIN client
within a second or so, and after every broker has been restarted it is still enforced (read back from
ZooKeeper), while what it does not allow stays refused."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, \
    ResourceType
from kazoo.client import KazooClient

from pybroker.client.connection import Connection
from pybroker.client.sasl import SaslCredentials
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import MetadataRequest, MetadataResponse
from tests.eventually import eventually
from tests.cluster.conftest import running_cluster
from tests.cluster.test_cluster import create_topic
from tests.integration.tls import BOUND
from tests.ports import restartable_port

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";')
EXTRA = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "inter.broker.listener.name": "SASL_PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
    "sasl.mechanism.inter.broker.protocol": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    # the brokers log in as User:broker; the test's own admin comes on PLAINTEXT as User:ANONYMOUS
    "super.users": "User:broker;User:ANONYMOUS",
}


def _ports(broker) -> dict[str, int]:
    return {name: int(port) for line in broker.log_lines if (m := BOUND.search(line)) for port, name in [m.groups()]}


def alice_sees(broker, topic: str) -> int:
    """The error code of ``topic`` in a Metadata answer to User:alice (SASL PLAIN) from this broker."""
    async def ask() -> int:
        connection = await Connection.open("127.0.0.1", _ports(broker)["SASL_PLAINTEXT"],
                                           sasl=SaslCredentials("PLAIN", "alice", "alice-secret"))
        try:
            answer = await connection.send_at(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
                name=topic)], allow_auto_topic_creation=False), 9, MetadataResponse)
        finally:
            await connection.close()
        return answer.topics[0].error_code
    return asyncio.run(ask())


def test_acl_added_on_one_broker_is_enforced_by_all_and_kept_across_restarts(tmp_path: Path) -> None:
    with running_cluster(tmp_path / "cluster", extra=EXTRA) as cluster:
        for topic in ("acl-open", "acl-closed"):
            create_topic(cluster, topic, 1)
        brokers = cluster.brokers
        assert [alice_sees(b, "acl-open") for b in brokers] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED] * 3
        admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
        binding = AclBinding(ResourceType.TOPIC, "acl-open", ResourcePatternType.LITERAL, "User:alice", "*",
                             AclOperation.DESCRIBE, AclPermissionType.ALLOW)
        added = time.monotonic()
        for future in admin.create_acls([binding]).values():
            future.result(timeout=30)
        lags = []
        for broker in brokers:
            eventually(lambda: alice_sees(broker, "acl-open") == ErrorCode.NONE,
                       f"broker {broker.port} to allow alice", timeout=10)
            lags.append(time.monotonic() - added)
        print(f"ACL enforced by all three brokers {max(lags):.3f}s after CreateAcls returned")
        assert max(lags) < 5  # the issue asks for a second; the margin is for a loaded test machine
        assert [alice_sees(b, "acl-closed") for b in brokers] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED] * 3

        zk = KazooClient(cluster.zk_connect)
        zk.start(10)
        try:
            assert b'"principal":"User:alice"' in zk.get("/kafka-acl/Topic/acl-open")[0].replace(b" ", b"")
        finally:
            zk.stop()
            zk.close()

        for broker in brokers:  # every broker down at once, then each back (on ports no one else takes meanwhile)
            broker.kill()
        for broker in brokers:
            broker.overrides["listeners"] = (f"PLAINTEXT://127.0.0.1:{restartable_port()},"
                                             f"SASL_PLAINTEXT://127.0.0.1:{restartable_port()}")
            broker.start()
        for broker in brokers:
            eventually(lambda: alice_sees(broker, "acl-open") == ErrorCode.NONE,
                       f"restarted broker {broker.port} to allow alice", timeout=60)
        assert [alice_sees(b, "acl-closed") for b in brokers] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED] * 3
