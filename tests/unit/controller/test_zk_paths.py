"""Znode codecs write the JSON ZooKeeper-mode Kafka writes (RECORDS.md section 6) and read it back."""

from __future__ import annotations

import json

from pybroker.zk import paths as zp
from pybroker.zk.client import split_chroot


def test_broker_registration_is_kafkas_version_5_document() -> None:
    data = zp.encode_broker("b1", 9092, "r1", 1700000000000)
    assert json.loads(data) == {
        "version": 5, "host": "b1", "port": 9092, "endpoints": ["PLAINTEXT://b1:9092"],
        "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"}, "jmx_port": -1,
        "timestamp": "1700000000000", "features": {}, "rack": "r1"}
    assert zp.decode_broker(1, data, 77) == zp.BrokerRegistration(1, "b1", 9092, "r1", 77)


def test_a_registration_without_plaintext_fields_is_read_from_its_first_endpoint() -> None:
    data = json.dumps({"version": 5, "host": None, "port": -1, "endpoints": ["SSL://b2:9093"]}).encode()
    assert zp.decode_broker(2, data, 1) == zp.BrokerRegistration(2, "b2", 9093, None, 1)


def test_partition_state_round_trips_with_its_znode_version() -> None:
    state = zp.LeaderAndIsr(1, 4, (1, 2, 3), 7)
    data = zp.encode_partition_state(state)
    assert json.loads(data) == {"version": 1, "leader": 1, "leader_epoch": 4, "isr": [1, 2, 3], "controller_epoch": 7}
    assert zp.decode_partition_state(data, 12) == zp.LeaderAndIsr(1, 4, (1, 2, 3), 7, 12)


def test_a_partition_waiting_to_compare_its_members_logs_says_so_in_a_key_kafka_skips() -> None:
    data = zp.encode_partition_state(zp.LeaderAndIsr(-1, 5, (1, 2), 7, elect_longest_log=True))
    assert json.loads(data) == {"version": 1, "leader": -1, "leader_epoch": 5, "isr": [1, 2], "controller_epoch": 7,
                                "elect_longest_log": True}
    assert zp.decode_partition_state(data, 3) == zp.LeaderAndIsr(-1, 5, (1, 2), 7, 3, elect_longest_log=True)


def test_topic_assignment_is_version_3_with_topic_id() -> None:
    data = zp.encode_topic({1: [2, 3], 0: [1, 2]}, "3ml2ytOKS9aK5eKcTyJSxA")
    assert json.loads(data) == {"version": 3, "partitions": {"0": [1, 2], "1": [2, 3]}, "adding_replicas": {},
                                "removing_replicas": {}, "topic_id": "3ml2ytOKS9aK5eKcTyJSxA"}
    assert zp.decode_topic(data) == zp.TopicAssignment({0: (1, 2), 1: (2, 3)}, "3ml2ytOKS9aK5eKcTyJSxA")


def test_cluster_id_controller_and_epoch_encodings() -> None:
    assert json.loads(zp.encode_cluster_id("abc")) == {"version": "1", "id": "abc"}
    assert zp.decode_cluster_id(zp.encode_cluster_id("abc")) == "abc"
    assert json.loads(zp.encode_controller(2, 5)) == {"version": 2, "brokerid": 2, "timestamp": "5",
                                                      "kraftControllerEpoch": -1}
    assert zp.decode_controller(zp.encode_controller(2, 5)) == 2
    assert zp.encode_controller_epoch(3) == b"3" and zp.decode_controller_epoch(b"3") == 3


def test_configs_changes_and_producer_id_blocks() -> None:
    assert json.loads(zp.encode_topic_config({"retention.ms": "5"})) == {"version": 1, "config": {"retention.ms": "5"}}
    assert zp.decode_config_change(zp.encode_config_change("topics/orders")) == ("topics", "orders")
    block = zp.ProducerIdBlock(1, 0, 999)
    assert json.loads(zp.encode_producer_id_block(block)) == {"version": 1, "broker": 1, "block_start": "0",
                                                              "block_end": "999"}
    assert zp.decode_producer_id_block(zp.encode_producer_id_block(block)) == block
    assert zp.decode_producer_id_block(b"") is None


def test_chroot_is_split_off_the_connect_string() -> None:
    assert split_chroot("h1:2181,h2:2181/kafka/prod") == ("h1:2181,h2:2181", "/kafka/prod")
    assert split_chroot("h1:2181") == ("h1:2181", "")
    assert split_chroot("h1:2181/") == ("h1:2181", "")
