"""Three ZooKeeper-mode brokers whose inter-broker listener is SASL_SSL (PLAIN): followers, the
controller and the transaction marker channel log in over TLS; a SCRAM user created through one
broker is stored in /config/users with a /config/changes notification and logs in on another broker
at once, without a restart."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from pybroker.client.cluster import KafkaClient
from pybroker.client.scram_admin import ScramUpsertion, alter_user_scram_credentials
from pybroker.security.dev_certs import make_dev_certs
from tests.eventually import eventually
from tests.cluster.conftest import running_cluster
from tests.cluster.test_cluster import consume, create_topic, partition_states, wait_for_full_isr
from tests.integration.tls import BOUND, tls_overrides

MESSAGES = 200
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
              'password="broker-secret" user_broker="broker-secret";')


def _port(broker, listener: str) -> int:
    return next(int(m.group(1)) for line in broker.log_lines if (m := BOUND.search(line)) and m.group(2) == listener)


def test_sasl_ssl_inter_broker_listener_and_scram_users_cluster_wide(tmp_path: Path) -> None:
    certs = make_dev_certs(tmp_path / "certs")
    extra = tls_overrides(certs, **{
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0", "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS})
    with running_cluster(tmp_path / "cluster", extra=extra) as cluster:
        create_topic(cluster, "sasl-replicated", 1, **{"min.insync.replicas": "2"})
        leader = wait_for_full_isr(cluster, "sasl-replicated")[0][0]
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(MESSAGES):
            producer.produce("sasl-replicated", f"m{i}".encode())
        assert producer.flush(60) == 0

        async def add_user() -> None:
            async with KafkaClient(cluster.brokers[0].bootstrap) as client:
                assert await alter_user_scram_credentials(
                    client, [ScramUpsertion("alice", "SCRAM-SHA-256", "alice-secret", 8192)], []) == {"alice": None}

        asyncio.run(add_user())
        zk = KazooClient(cluster.zk_connect)
        zk.start(10)
        try:
            stored = json.loads(zk.get("/config/users/alice")[0])
            changes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in zk.get_children("/config/changes")]
        finally:
            zk.stop()
            zk.close()
        assert stored["version"] == 1 and list(stored["config"]) == ["SCRAM-SHA-256"]
        assert stored["config"]["SCRAM-SHA-256"].endswith(",iterations=8192") and "alice-secret" not in str(stored)
        assert {"version": 2, "entity_path": "users/alice"} in changes
        other = cluster.brokers[(leader + 1) % 3]
        scram = {"bootstrap.servers": f"127.0.0.1:{_port(other, 'SASL_SSL')}", "security.protocol": "SASL_SSL",
                 "ssl.ca.location": str(certs.ca), "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
                 "sasl.password": "alice-secret"}

        def logs_in() -> bool:
            try:
                return bool(AdminClient(scram).list_topics(timeout=3).brokers)
            except Exception:
                return False

        eventually(logs_in, "alice to log in on another broker", timeout=30)
        cluster.brokers[leader].kill()
        eventually(lambda: partition_states(cluster, "sasl-replicated")[0][0] not in (leader, -1), "a new leader",
                   timeout=60)
        assert consume(cluster, "sasl-replicated", 1, MESSAGES)[0] == [f"m{i}".encode() for i in range(MESSAGES)]
