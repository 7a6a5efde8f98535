"""Metadata answers as Apache Kafka gives them: internal topics in an all-topics answer, topics asked by id."""

from __future__ import annotations

import uuid

from confluent_kafka.admin import AdminClient

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_cli_topics import ok, topics
from tests.integration.test_bad_input import WireClient

OFFSETS_TOPIC = "__consumer_offsets"


def _create(client: WireClient, name: str) -> uuid.UUID:
    created = client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=2, replication_factor=1)]), 7, CreateTopicsResponse)
    assert created.topics[0].error_code == 0
    return created.topics[0].topic_id


def _wait_for_offsets_topic(client: WireClient) -> None:
    """FindCoordinator creates `__consumer_offsets`; poll Metadata by name until it exists."""
    client.request(FindCoordinatorRequest(key="answers-group", key_type=0), 3, FindCoordinatorResponse)
    eventually(lambda: client.request(MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=OFFSETS_TOPIC)], allow_auto_topic_creation=False),
        12, MetadataResponse).topics[0].error_code == 0, "__consumer_offsets to be created", timeout=20)


def test_all_topics_answer_lists_internal_topics_as_internal(shared_broker: BrokerProcess) -> None:
    client = WireClient(shared_broker.bootstrap)
    _create(client, "answers-plain")
    _wait_for_offsets_topic(client)
    for version in (1, 9, 12):
        answer = client.request(MetadataRequest(topics=None), version, MetadataResponse)
        internal = {t.name: t.is_internal for t in answer.topics}
        assert internal[OFFSETS_TOPIC] is True, version
        assert internal["answers-plain"] is False
    client.close()
    listed = AdminClient({"bootstrap.servers": shared_broker.bootstrap}).list_topics(timeout=10).topics
    assert OFFSETS_TOPIC in listed and "answers-plain" in listed
    # kafka-topics.sh lists internal topics unless --exclude-internal.
    assert {OFFSETS_TOPIC, "answers-plain"} <= set(ok(topics(shared_broker, "--list")))
    excluded = ok(topics(shared_broker, "--list", "--exclude-internal"))
    assert "answers-plain" in excluded and OFFSETS_TOPIC not in excluded


def test_metadata_v12_by_topic_id(shared_broker: BrokerProcess) -> None:
    client = WireClient(shared_broker.bootstrap)
    topic_id = _create(client, "answers-by-id")
    unknown = uuid.uuid4()
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=None, topic_id=topic_id),
                                      MetadataRequest.MetadataRequestTopic(name=None, topic_id=unknown)],
                              allow_auto_topic_creation=False)
    for _ in range(2):  # the second answer may come from the encoded-answer cache
        answer = client.request(request, 12, MetadataResponse)
        found = {t.topic_id: t for t in answer.topics}
        assert found[topic_id].error_code == 0 and found[topic_id].name == "answers-by-id"
        assert len(found[topic_id].partitions) == 2
        assert found[unknown].error_code == ErrorCode.UNKNOWN_TOPIC_ID and found[unknown].name is None
        assert found[unknown].partitions == []
    client.close()


def test_metadata_v10_and_v11_refuse_topic_ids_as_kafka_does(shared_broker: BrokerProcess) -> None:
    """Kafka: 'Topic name can not be null for version N' -> INVALID_REQUEST for every topic, name ""."""
    client = WireClient(shared_broker.bootstrap)
    topic_id = _create(client, "answers-by-id-old")
    unknown = uuid.uuid4()
    for version in (10, 11):
        request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=None, topic_id=unknown),
                                          MetadataRequest.MetadataRequestTopic(name=None, topic_id=topic_id),
                                          MetadataRequest.MetadataRequestTopic(name="answers-by-id-old")],
                                  allow_auto_topic_creation=False)
        answer = client.request(request, version, MetadataResponse)
        assert (answer.brokers, answer.cluster_id, answer.controller_id) == ([], None, -1)
        assert [(t.error_code, t.name, t.topic_id, t.partitions) for t in answer.topics] == [
            (ErrorCode.INVALID_REQUEST, "", unknown, []),
            (ErrorCode.INVALID_REQUEST, "", topic_id, []),
            (ErrorCode.INVALID_REQUEST, "answers-by-id-old", uuid.UUID(int=0), []),
        ]
    client.close()


def test_v12_by_id_with_an_empty_name_answers_by_id(shared_broker: BrokerProcess) -> None:
    """kafka-clients' Admin.describeTopics(TopicCollection.ofTopicIds(...)) sends the id with name "": Kafka
    resolves the id and ignores the name (a zero id in the answer makes the Java client throw)."""
    client = WireClient(shared_broker.bootstrap)
    topic_id = _create(client, "answers-by-id-empty-name")
    missing = uuid.uuid4()
    answer = client.request(MetadataRequest(topics=[
        MetadataRequest.MetadataRequestTopic(name="", topic_id=topic_id),
        MetadataRequest.MetadataRequestTopic(name="", topic_id=missing)], allow_auto_topic_creation=False),
        12, MetadataResponse)
    client.close()
    found, unknown = answer.topics
    assert (found.error_code, found.name, found.topic_id, len(found.partitions)) == (
        0, "answers-by-id-empty-name", topic_id, 2)
    assert (unknown.error_code, unknown.name, unknown.topic_id) == (ErrorCode.UNKNOWN_TOPIC_ID, None, missing)
