"""DescribeTopicPartitions (API 75, KIP-966) as kafka-clients 3.9's describeTopics sends it: raw requests
built from our codecs, paginated by the cursor, cross-checked with confluent-kafka's view of the topics."""

from __future__ import annotations

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.common.topic import topic_id_to_string
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
)
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient

Request = DescribeTopicPartitionsRequest
TOPICS = {"dtp-a": 3, "dtp-b": 2}


def describe(client: WireClient, names: list[str], limit: int = 2000,
             cursor: tuple[str, int] | None = None) -> DescribeTopicPartitionsResponse:
    request = Request(topics=[Request.TopicRequest(name=n) for n in names], response_partition_limit=limit,
                      cursor=Request.Cursor(topic_name=cursor[0], partition_index=cursor[1]) if cursor else None)
    return client.request(request, 0, DescribeTopicPartitionsResponse)


def test_describe_topic_partitions_pages_through_every_partition(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(n, p, 1) for n, p in TOPICS.items()]).values():
        future.result(30)
    known = admin.list_topics(timeout=10).topics
    client = WireClient(broker.bootstrap)
    try:
        versions = client.request(ApiVersionsRequest(), 3, ApiVersionsResponse)
        assert (ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0) in [(k.api_key, k.min_version, k.max_version)
                                                            for k in versions.api_keys]

        whole = describe(client, ["dtp-b", "missing", "dtp-a"])
        assert whole.next_cursor is None
        assert [(t.name, t.error_code) for t in whole.topics] == [
            ("dtp-a", 0), ("dtp-b", 0), ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        for topic in whole.topics[:2]:
            assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes) for p in topic.partitions] == [
                (p.id, p.leader, list(p.replicas), list(p.isrs)) for p in
                sorted(known[topic.name].partitions.values(), key=lambda p: p.id)]
            described = admin.describe_topics(TopicCollection([topic.name]))[topic.name].result(30)
            librdkafka_id = str(described.topic_id).translate(str.maketrans("+/", "-_"))
            assert topic_id_to_string(topic.topic_id) == librdkafka_id

        pages, cursor = [], None
        while True:
            page = describe(client, ["dtp-a", "dtp-b"], limit=2, cursor=cursor)
            pages.append([(t.name, [p.partition_index for p in t.partitions]) for t in page.topics])
            if page.next_cursor is None:
                break
            cursor = (page.next_cursor.topic_name, page.next_cursor.partition_index)
        assert pages == [[("dtp-a", [0, 1])], [("dtp-a", [2]), ("dtp-b", [0])], [("dtp-b", [1])]]

        invalid = describe(client, ["dtp-a"], cursor=("dtp-b", 0))
        assert [(t.name, t.error_code) for t in invalid.topics] == [("dtp-a", ErrorCode.INVALID_REQUEST)]
    finally:
        client.close()
