"""ACL enforcement with real clients: a SASL PLAIN user allowed on one topic and denied on another,
a consumer whose group is denied, a transactional producer without TransactionalId Write, and
Metadata leaving out what the user may not Describe. User:admin is a super user."""

from __future__ import annotations

import time
from typing import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from pybroker.server.authorization import CHECKED_APIS, NO_ACL_APIS, NOT_YET_CHECKED
from pybroker.server.handlers import ALL_HANDLERS
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_sasl import SASL_OVERRIDES, librdkafka

OVERRIDES = {**SASL_OVERRIDES, "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
             "super.users": "User:admin"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("authz"), OVERRIDES).start()
    admin = AdminClient(librdkafka(process, "PLAIN", "admin", "admin-secret"))
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in ("open", "closed")]).values():
        future.result(timeout=30)
    allow = [AclBinding(ResourceType.TOPIC, "open", ResourcePatternType.LITERAL, "User:alice", "*", op,
                        AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ)]
    allow.append(AclBinding(ResourceType.GROUP, "ok-", ResourcePatternType.PREFIXED, "User:alice", "*",
                            AclOperation.READ, AclPermissionType.ALLOW))
    for future in admin.create_acls(allow).values():
        future.result(timeout=30)
    yield process
    process.kill()


def alice(broker: BrokerProcess, **extra: str) -> dict[str, str]:
    return librdkafka(broker, "PLAIN", "alice", "alice-plain", **extra)


def produce_error(broker: BrokerProcess, topic: str) -> KafkaError | None:
    producer = Producer(alice(broker, **{"message.timeout.ms": "10000"}))
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(20)
    assert outcome, "no delivery report"
    return outcome[0]


def test_producer_allowed_on_one_topic_and_denied_on_the_other(secured):
    assert produce_error(secured, "open") is None
    error = produce_error(secured, "closed")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_metadata_leaves_out_topics_alice_may_not_describe(secured):
    admin = AdminClient(alice(secured))
    assert set(admin.list_topics(timeout=20).topics) == {"open"}
    super_admin = AdminClient(librdkafka(secured, "PLAIN", "admin", "admin-secret"))
    assert {"open", "closed"} <= set(super_admin.list_topics(timeout=20).topics)


def consume_error(broker: BrokerProcess, group: str) -> KafkaError | None:
    consumer = Consumer(alice(broker, **{"group.id": group, "auto.offset.reset": "earliest"}))
    consumer.subscribe(["open"])
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is None:
                return None
            if message.error().code() != KafkaError._PARTITION_EOF:
                return message.error()
    finally:
        consumer.close()
    raise AssertionError("neither a record nor an error")


def test_consumer_whose_group_is_denied(secured):
    assert produce_error(secured, "open") is None
    assert consume_error(secured, "ok-readers") is None
    error = consume_error(secured, "forbidden")
    assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_transactional_producer_without_transactional_id_write(secured):
    producer = Producer(alice(secured, **{"transactional.id": "alice-tx"}))
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(20)
    assert raised.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_every_api_checks_an_acl_or_is_on_kafkas_no_acl_list():
    """Each served API is on Kafka's no-ACL list, checks an ACL, or is listed as not checked yet (a
    new handler fails this test until it is placed)."""
    placed = NO_ACL_APIS | set(CHECKED_APIS) | NOT_YET_CHECKED
    assert not NO_ACL_APIS & set(CHECKED_APIS) and not set(CHECKED_APIS) & NOT_YET_CHECKED
    assert [h.api_key for h in ALL_HANDLERS if h.api_key not in placed] == []
