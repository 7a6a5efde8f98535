"""The schema registry in a ZooKeeper cluster: one writer (the registry of the broker leading
``_schemas``), followers forwarding writes and reading their own view, a leader failover that loses
no schema and hands out no id twice."""

from __future__ import annotations

import concurrent.futures
import json
import re
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from tests.eventually import eventually
from tests.cluster.conftest import Cluster, running_cluster

URL = re.compile(r"Schema registry listening on (http://\S+)")


def record(name: str, *fields: str) -> Schema:
    return Schema(json.dumps({"type": "record", "name": name,
                              "fields": [{"name": f, "type": "string", "default": ""} for f in fields]}), "AVRO")


@pytest.fixture(scope="module")
def registry_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("registry-cluster"),
                         extra={"schema.registry.listeners": "http://127.0.0.1:0"}) as cluster:
        yield cluster


def urls(cluster: Cluster) -> dict[int, str]:
    found = {}
    for broker_id, broker in enumerate(cluster.brokers):
        match = URL.search(broker.log_text())
        if broker.process is not None and match:
            found[broker_id] = match.group(1)
    return found


def schemas_leader(cluster: Cluster) -> int:
    def leader() -> int | None:
        metadata = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics("_schemas", timeout=10)
        partition = metadata.topics["_schemas"].partitions.get(0) if "_schemas" in metadata.topics else None
        return partition.leader if partition is not None and partition.leader >= 0 else None

    found: list[int] = []
    eventually(lambda: found.append(current) is None if (current := leader()) is not None else False,
               "a leader of _schemas")
    return found[-1]


def test_writes_through_any_broker_one_id_space_and_failover(registry_cluster: Cluster) -> None:
    addresses = urls(registry_cluster)
    assert len(addresses) == 3
    clients = {broker_id: SchemaRegistryClient({"url": url}) for broker_id, url in addresses.items()}
    first = clients[0].register_schema("orders-value", record("Order", "a"))
    leader = schemas_leader(registry_cluster)
    follower = next(b for b in clients if b != leader)
    # A follower forwards the write and answers once its own view holds it: read-your-writes there.
    second = clients[follower].register_schema("orders-value", record("Order", "a", "b"))
    assert second != first
    assert clients[follower].get_latest_version("orders-value").schema_id == second
    for client in clients.values():  # every broker serves reads from its own view
        eventually(lambda: client.get_versions("orders-value") == [1, 2], "every view to hold both versions")

    def register(index: int) -> int:  # the same schema through every broker at once: one id
        return SchemaRegistryClient({"url": addresses[index % 3]}).register_schema(
            f"shared-{index % 2}", record("Shared", "x"))

    with concurrent.futures.ThreadPoolExecutor(9) as pool:
        assert len(set(pool.map(register, range(18)))) == 1

    before = {subject: clients[leader].get_versions(subject) for subject in clients[leader].get_subjects()}
    highest = max(clients[leader].get_latest_version(s).schema_id for s in before)
    registry_cluster.brokers[leader].kill()  # SIGKILL: the controller moves _schemas' leadership
    survivors = {b: c for b, c in clients.items() if b != leader}
    eventually(lambda: schemas_leader(registry_cluster) in survivors, "a new leader of _schemas", timeout=60)
    writer = next(iter(survivors.values()))
    third = eventually(lambda: _try_register(writer, "orders-value", record("Order", "a", "b", "c")),
                       "a registration after the failover", timeout=60)
    assert third > highest  # no id handed out twice
    for client in survivors.values():
        eventually(lambda: all(client.get_versions(s)[:len(v)] == v for s, v in before.items()),
                   "the survivors to hold every schema registered before the failover")
        assert json.loads(client.get_schema(first).schema_str) == json.loads(record("Order", "a").schema_str)


def _try_register(client: SchemaRegistryClient, subject: str, schema: Schema, *waiting_for: int) -> int | None:
    """The id, or None on an error that passes (no leader yet, or one of ``waiting_for``)."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        return client.register_schema(subject, schema)
    except SchemaRegistryError as exc:
        if exc.error_code in (50001, 50002, 50003, 50004, *waiting_for):  # the client would retry these
            return None
        raise


def test_embedded_cluster_exposes_every_brokers_registry(tmp_path: Path) -> None:
    from pybroker.testing import EmbeddedCluster

    with EmbeddedCluster(3, schema_registry=True, tmp_dir=tmp_path) as cluster:
        urls = cluster.schema_registry_url.split(",")
        assert len(urls) == 3
        schema_id = SchemaRegistryClient({"url": cluster.schema_registry_url}).register_schema(
            "embedded-value", record("Embedded", "a"))
        for url in urls:  # every broker's view, read-your-writes on the one that answered
            client = SchemaRegistryClient({"url": url})
            eventually(lambda: "embedded-value" in client.get_subjects(), f"{url} to hold the subject")
            assert client.get_latest_version("embedded-value").schema_id == schema_id


def test_followers_forward_over_https_with_the_clients_credentials(tmp_path: Path) -> None:
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    from pybroker.security.dev_certs import make_dev_certs

    certs = make_dev_certs(tmp_path / "certs")
    extra = {"schema.registry.listeners": "https://127.0.0.1:0", "schema.registry.authentication.method": "BASIC",
             "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.broker),
             "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca)}
    with running_cluster(tmp_path / "cluster", extra=extra) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for future in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"carol-secret")]).values():
            future.result(timeout=30)
        addresses = {b: re.search(r"Schema registry listening on (https://\S+)", broker.log_text()).group(1)
                     for b, broker in enumerate(cluster.brokers)}

        def client(broker_id: int, password: str = "carol-secret") -> SchemaRegistryClient:
            return SchemaRegistryClient({"url": addresses[broker_id], "ssl.ca.location": str(certs.ca),
                                         "basic.auth.user.info": f"carol:{password}"})

        for broker_id in addresses:  # carol's credential reaches each broker's store through ZooKeeper
            eventually(lambda: _try_register(client(broker_id), "tls-value", record("Tls", "a"), 401),
                       f"carol's credential on broker {broker_id}")
        leader = schemas_leader(cluster)
        follower = next(b for b in addresses if b != leader)
        schema_id = client(follower).register_schema("tls-value", record("Tls", "a", "b"))  # forwarded over TLS
        assert client(follower).get_latest_version("tls-value").schema_id == schema_id
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        with pytest.raises(SchemaRegistryError) as refused:
            client(follower, "wrong").register_schema("tls-value", record("Tls", "a", "b", "c"))
        assert refused.value.http_status_code == 401
