"""The registry secured: HTTPS with the broker's TLS settings, HTTP basic authentication against the
broker's PLAIN and SCRAM users, and Kafka ACLs on the registry topic deciding who reads, writes and
changes configs (User:admin is a super user)."""

from __future__ import annotations

import json
import re
from typing import Iterator

import pytest
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType, UserScramCredentialUpsertion,
                                   ScramCredentialInfo, ScramMechanism)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from pybroker.security.dev_certs import DevCerts, make_dev_certs
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_sasl import SASL_OVERRIDES, librdkafka

SCHEMA = Schema(json.dumps({"type": "record", "name": "S", "fields": [{"name": "a", "type": "int"}]}), "AVRO")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> DevCerts:
    return make_dev_certs(tmp_path_factory.mktemp("registry-certs"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, certs: DevCerts) -> Iterator[tuple[BrokerProcess, str]]:
    overrides = {**SASL_OVERRIDES, "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                 "super.users": "User:admin", "schema.registry.listeners": "https://127.0.0.1:0",
                 "schema.registry.authentication.method": "BASIC", "ssl.keystore.type": "PEM",
                 "ssl.keystore.location": str(certs.broker), "ssl.truststore.type": "PEM",
                 "ssl.truststore.location": str(certs.ca)}
    process = BrokerProcess(tmp_path_factory.mktemp("registry-secured"), overrides).start()
    url = re.search(r"Schema registry listening on (https://\S+)", process.log_text())
    assert url is not None
    admin = AdminClient(librdkafka(process, "PLAIN", "admin", "admin-secret"))
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bob-secret")])
    for future in futures.values():
        future.result(timeout=30)
    yield process, url.group(1)
    process.kill()


def client(url: str, certs: DevCerts, user: str | None, password: str = "") -> SchemaRegistryClient:
    config = {"url": url, "ssl.ca.location": str(certs.ca)}
    if user is not None:
        config["basic.auth.user.info"] = f"{user}:{password}"
    return SchemaRegistryClient(config)


def status(call) -> int:  # type: ignore[no-untyped-def]
    try:
        call()
    except SchemaRegistryError as exc:
        return exc.http_status_code
    return 200


def test_basic_authentication_against_plain_and_scram_users(secured: tuple[BrokerProcess, str], certs: DevCerts) -> None:
    _, url = secured
    assert status(lambda: client(url, certs, None).get_subjects()) == 401
    assert status(lambda: client(url, certs, "alice", "wrong").get_subjects()) == 401
    assert status(lambda: client(url, certs, "nobody", "x").get_subjects()) == 401
    assert status(lambda: client(url, certs, "admin", "admin-secret").get_subjects()) == 200  # PLAIN, super user
    # bob's SCRAM credential is checked as a login would; without ACLs he is authenticated but not authorized
    eventually(lambda: status(lambda: client(url, certs, "bob", "bob-secret").get_subjects()) == 403,
               "bob's SCRAM credential to reach the broker's store")
    assert status(lambda: client(url, certs, "bob", "bob-wrong").get_subjects()) == 401


def test_acls_on_the_registry_topic(secured: tuple[BrokerProcess, str], certs: DevCerts) -> None:
    process, url = secured
    alice = client(url, certs, "alice", "alice-plain")
    assert status(lambda: alice.get_subjects()) == 403
    client(url, certs, "admin", "admin-secret").register_schema("acl-value", SCHEMA)
    admin = AdminClient(librdkafka(process, "PLAIN", "admin", "admin-secret"))
    grant = AclBinding(ResourceType.TOPIC, "_schemas", ResourcePatternType.LITERAL, "User:alice", "*",
                       AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    for future in admin.create_acls([grant]).values():
        future.result(timeout=30)
    eventually(lambda: status(lambda: alice.get_subjects()) == 200, "alice's Describe ACL to apply")
    assert alice.get_latest_version("acl-value").version == 1
    assert status(lambda: alice.register_schema("alice-value", SCHEMA)) == 403
    assert status(lambda: alice.set_compatibility("acl-value", "NONE")) == 403
    for future in admin.create_acls([AclBinding(ResourceType.TOPIC, "_schemas", ResourcePatternType.LITERAL,
                                                "User:alice", "*", AclOperation.WRITE,
                                                AclPermissionType.ALLOW)]).values():
        future.result(timeout=30)
    eventually(lambda: status(lambda: alice.register_schema("alice-value", SCHEMA)) == 200, "alice's Write ACL")
    assert status(lambda: alice.set_compatibility("acl-value", "NONE")) == 403  # configs need AlterConfigs


def test_plain_http_on_the_https_port_is_refused(secured: tuple[BrokerProcess, str]) -> None:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(secured[1])
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        connection.request("GET", "/subjects")
        connection.getresponse()
    connection.close()
