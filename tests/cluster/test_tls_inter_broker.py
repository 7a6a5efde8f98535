"""Three ZooKeeper-mode brokers whose inter-broker listener is SSL with required client certificates:
the registrations carry both listeners, followers replicate over TLS, and a killed leader fails over."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from confluent_kafka import Producer
from kazoo.client import KazooClient

from pybroker.security.dev_certs import make_dev_certs
from tests.eventually import eventually
from tests.cluster.conftest import running_cluster
from tests.cluster.test_cluster import consume, create_topic, partition_states, wait_for_full_isr
from tests.integration.tls import BOUND, tls_overrides

MESSAGES = 300


def _ssl_port(broker) -> int:
    return next(int(m.group(1)) for line in broker.log_lines if (m := BOUND.search(line)) and m.group(2) == "SSL")


def _established_to(port: int) -> int:
    out = subprocess.run(["ss", "-Htn", "state", "established", f"( sport = :{port} )"], capture_output=True,
                         text=True, check=True).stdout
    return len(out.splitlines())


def test_replication_and_failover_over_an_ssl_inter_broker_listener(tmp_path: Path) -> None:
    certs = make_dev_certs(tmp_path / "certs")
    extra = tls_overrides(certs, **{"inter.broker.listener.name": "SSL", "ssl.client.auth": "required"})
    with running_cluster(tmp_path / "cluster", extra=extra) as cluster:
        zk = KazooClient(cluster.zk_connect)
        zk.start(10)
        try:
            registration = json.loads(zk.get("/brokers/ids/0")[0])
        finally:
            zk.stop()
            zk.close()
        ssl_ports = [_ssl_port(b) for b in cluster.brokers]
        assert registration["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}
        assert registration["endpoints"] == [f"PLAINTEXT://127.0.0.1:{cluster.brokers[0].port}",
                                             f"SSL://127.0.0.1:{ssl_ports[0]}"]
        assert (registration["host"], registration["port"]) == ("127.0.0.1", cluster.brokers[0].port)

        create_topic(cluster, "tls-replicated", 1, **{"min.insync.replicas": "2"})
        leader = wait_for_full_isr(cluster, "tls-replicated")[0][0]
        # Clients use the PLAINTEXT listener only: connections on the SSL ports are brokers' own.
        assert _established_to(ssl_ports[leader]) >= 2  # the two followers' fetchers (and the controller's)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(MESSAGES):
            producer.produce("tls-replicated", f"m{i}".encode())
        assert producer.flush(60) == 0
        cluster.brokers[leader].kill()
        eventually(lambda: partition_states(cluster, "tls-replicated")[0][0] not in (leader, -1), "a new leader",
                   timeout=60)
        assert consume(cluster, "tls-replicated", 1, MESSAGES)[0] == [f"m{i}".encode() for i in range(MESSAGES)]
