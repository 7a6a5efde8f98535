"""kafka-topics.sh / kafka-broker-api-versions.sh line formats and argument parsing, without a broker."""

from __future__ import annotations

import uuid

import pytest

from pybroker.admin.api_versions import api_line, node_text, versions_text
from pybroker.admin.options import topic_filter
from pybroker.client.command_line import CommandError
from pybroker.admin.topics import DescribeOptions, parse_configs, parse_replica_assignment, partition_line, topic_line
from pybroker.client import BrokerNode, ConfigEntry, PartitionInfo, TopicDescription, VersionRange
from pybroker.common.topic import ZERO_UUID, topic_id_from_string

TOPIC_ID = topic_id_from_string("gjwZn4F1TxSkezHfBtyowA")
OVERRIDE = ConfigEntry("retention.ms", "5000", source=1, is_default=False)
DEFAULT = ConfigEntry("min.insync.replicas", "2", source=5, is_default=True)


def topic(*partitions: PartitionInfo, topic_id: uuid.UUID = TOPIC_ID) -> TopicDescription:
    return TopicDescription("t", topic_id, False, partitions)


def test_topic_line_lists_only_non_default_configs() -> None:
    described = topic(PartitionInfo(0, 1, (1, 2), (1, 2)))
    assert topic_line(described, [OVERRIDE]) == \
        "Topic: t\tTopicId: gjwZn4F1TxSkezHfBtyowA\tPartitionCount: 1\tReplicationFactor: 2\tConfigs: retention.ms=5000"
    assert topic_line(topic(PartitionInfo(0, 1, (1,), (1,)), topic_id=ZERO_UUID), []) == \
        "Topic: t\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: "


def test_partition_line_prints_none_for_a_missing_leader() -> None:
    assert partition_line("t", PartitionInfo(3, None, (1, 2), ())) == \
        "\tTopic: t\tPartition: 3\tLeader: none\tReplicas: 1,2\tIsr: "


def test_report_options_select_partitions_and_hide_the_topic_line() -> None:
    healthy, shrunk, leaderless = PartitionInfo(0, 1, (1, 2), (1, 2)), PartitionInfo(1, 1, (1, 2), (1,)), \
        PartitionInfo(2, None, (1, 2), ())
    described = topic(healthy, shrunk, leaderless)
    configs = [OVERRIDE, DEFAULT]
    assert len(DescribeOptions(frozenset({1, 2})).lines(described, configs)) == 4
    assert DescribeOptions(frozenset({1, 2}), under_replicated=True).lines(described, configs) == \
        [partition_line("t", shrunk), partition_line("t", leaderless)]
    assert DescribeOptions(frozenset({1, 2}), unavailable=True).lines(described, configs) == \
        [partition_line("t", leaderless)]
    assert DescribeOptions(frozenset({1, 2}), at_min_isr=True).lines(described, configs) == \
        [partition_line("t", healthy)]
    assert DescribeOptions(frozenset({2}), unavailable=True).lines(described, configs) == \
        [partition_line("t", p) for p in (healthy, shrunk, leaderless)]  # leader 1 is not live
    assert DescribeOptions(frozenset({1}), overrides_only=True).lines(described, [DEFAULT]) == []


def test_topic_filter_is_a_whole_name_regex_with_commas_as_alternatives() -> None:
    names = ["__consumer_offsets", "orders", "orders-eu", "payments"]
    assert topic_filter("orders", False, names) == ["orders"]
    assert topic_filter("orders.*,payments", False, names) == ["orders", "orders-eu", "payments"]
    assert topic_filter(None, True, names) == ["orders", "orders-eu", "payments"]
    with pytest.raises(CommandError, match=r"\(unclosed is an invalid regex"):
        topic_filter("(unclosed", False, names)


def test_replica_assignment_and_config_parsing_follow_kafka_topics() -> None:
    assert parse_replica_assignment("0:1,1:2") == {0: [0, 1], 1: [1, 2]}
    with pytest.raises(CommandError, match="duplicate entries: 1"):
        parse_replica_assignment("1:1")
    with pytest.raises(CommandError, match=r"Partition 1 has different replication factor: \[1\]"):
        parse_replica_assignment("0:1,1")
    assert parse_configs(["retention.ms = 5", "cleanup.policy=compact"]) == \
        {"retention.ms": "5", "cleanup.policy": "compact"}
    with pytest.raises(CommandError, match='format "key=val"'):
        parse_configs(["a=b=c"])


def test_api_versions_lines_mark_usable_and_unusable_versions() -> None:
    assert api_line(0, VersionRange(3, 11), VersionRange(0, 11)) == "Produce(0): 3 to 11 [usable: 11]"
    assert api_line(47, VersionRange(0, 0), VersionRange(0, 0)) == "OffsetDelete(47): 0 [usable: 0]"
    assert api_line(3, VersionRange(13, 14), VersionRange(0, 12)) == "Metadata(3): 13 to 14 [unusable: node too new]"
    assert node_text(BrokerNode(0, "127.0.0.1", 9092)) == "127.0.0.1:9092 (id: 0 rack: null)"
    assert versions_text({18: VersionRange(0, 4), 0: VersionRange(3, 11)},
                         {18: VersionRange(0, 4), 0: VersionRange(0, 11)}) == \
        "(\n\tProduce(0): 3 to 11 [usable: 11],\n\tApiVersions(18): 0 to 4 [usable: 4]\n)"
