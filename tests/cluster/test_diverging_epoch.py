"""Fetch v12+ ``LastFetchedEpoch`` against a real leader whose log has two leader epochs (KIP-320/KIP-595): two
brokers and ZooKeeper; the first leader stops (controlled shutdown) and the second leads at a newer epoch. A fetch
whose last fetched epoch ended before its offset is answered ``DivergingEpoch`` and no records, as Kafka does."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Producer

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import FetchRequest, FetchResponse, MetadataRequest, MetadataResponse
from tests.cluster.conftest import Cluster, running_cluster
from tests.cluster.test_cluster import create_topic, partition_states, wait_for_full_isr
from tests.eventually import eventually
from tests.integration.test_bad_input import WireClient

TOPIC = "diverging"
FIRST, SECOND = 5, 3  # records written in the first leader's epoch, then in the second's


@pytest.fixture(scope="module")
def two_epochs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, int, int]]:
    """The cluster, with broker 1 leading TOPIC-0 at a newer epoch than broker 0 wrote offsets 0-4 in; and those
    two epochs."""
    with running_cluster(tmp_path_factory.mktemp("diverging"), brokers=2) as cluster:
        create_topic(cluster, TOPIC, 1, assignment=[[0, 1]])
        assert wait_for_full_isr(cluster, TOPIC)[0][0] == 0
        produce(cluster.brokers[0].bootstrap, FIRST)
        old_epoch = leader_epoch(cluster.brokers[0].bootstrap, 0)
        assert cluster.brokers[0].stop() == 0
        eventually(lambda: partition_states(cluster, TOPIC)[0][::2] == (1, [1]), "broker 1 to lead alone")
        new_epoch = leader_epoch(cluster.brokers[1].bootstrap, 1)
        assert new_epoch > old_epoch
        produce(cluster.brokers[1].bootstrap, SECOND)
        yield cluster, old_epoch, new_epoch


def produce(bootstrap: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(TOPIC, value=b"m%d" % i, partition=0)
    assert producer.flush(30) == 0


def leader_epoch(bootstrap: str, leader: int) -> int:
    """The partition's leader epoch, once ``bootstrap``'s metadata names ``leader``."""
    def described() -> tuple[int] | None:  # a tuple: epoch 0 is falsy
        wire = WireClient(bootstrap)
        try:
            answer = wire.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]), 12,
                                  MetadataResponse)
        finally:
            wire.close()
        partitions = answer.topics[0].partitions
        return (partitions[0].leader_epoch,) if partitions and partitions[0].leader_id == leader else None
    return eventually(described, f"broker {leader} to be described as the leader")[0]


def fetch(bootstrap: str, version: int, offset: int, last_fetched_epoch: int) -> FetchResponse.PartitionData:
    wire = WireClient(bootstrap)
    try:
        answer = fetch_on(wire, version, offset, last_fetched_epoch)
    finally:
        wire.close()
    return answer.responses[0].partitions[0]


def fetch_on(wire: WireClient, version: int, offset: int, last_fetched_epoch: int, session_id: int = 0,
             session_epoch: int = -1) -> FetchResponse:
    topic_id = wire.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]), 12,
                            MetadataResponse).topics[0].topic_id
    request = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=session_id,
                           session_epoch=session_epoch, topics=[FetchRequest.FetchTopic(
                               topic=TOPIC, topic_id=topic_id, partitions=[FetchRequest.FetchPartition(
                                   partition=0, fetch_offset=offset, partition_max_bytes=1 << 20,
                                   last_fetched_epoch=last_fetched_epoch)])])
    answer = wire.request(request, version, FetchResponse)
    assert answer.error_code == ErrorCode.NONE
    return answer


@pytest.mark.parametrize("version", [12, 17])  # topics by name, by id
def test_an_offset_past_the_end_of_the_last_fetched_epoch_answers_the_diverging_epoch(
        two_epochs: tuple[Cluster, int, int], version: int) -> None:
    cluster, old_epoch, new_epoch = two_epochs
    leader = cluster.brokers[1].bootstrap
    end = FIRST + SECOND
    diverged = fetch(leader, version, FIRST + 2, old_epoch)
    assert diverged.error_code == ErrorCode.NONE
    assert (diverged.diverging_epoch.epoch, diverged.diverging_epoch.end_offset) == (old_epoch, FIRST)
    assert not diverged.records
    assert (diverged.high_watermark, diverged.last_stable_offset, diverged.log_start_offset) == (end, end, 0)
    # an epoch newer than any the leader has: Kafka cannot say where it ends
    assert fetch(leader, version, end, new_epoch + 1).error_code == ErrorCode.OFFSET_OUT_OF_RANGE


@pytest.mark.parametrize("last_fetched_epoch,offset", [(-2, FIRST + 2), (0, FIRST), (0, 0), (1, FIRST + SECOND)])
def test_a_consistent_epoch_and_offset_reads_records_as_before(
        two_epochs: tuple[Cluster, int, int], last_fetched_epoch: int, offset: int) -> None:
    cluster, old_epoch, new_epoch = two_epochs
    epoch = {-2: -1, 0: old_epoch, 1: new_epoch}[last_fetched_epoch]
    answer = fetch(cluster.brokers[1].bootstrap, 12, offset, epoch)
    assert (answer.error_code, answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset) == (0, -1, -1)
    assert answer.high_watermark == FIRST + SECOND
    assert bool(answer.records) == (offset < FIRST + SECOND)


def test_an_incremental_fetch_session_answers_a_partition_that_only_diverges(
        two_epochs: tuple[Cluster, int, int]) -> None:
    """KIP-227: an incremental answer leaves out partitions with nothing new; a diverging epoch is something new."""
    cluster, old_epoch, new_epoch = two_epochs
    end = FIRST + SECOND
    wire = WireClient(cluster.brokers[1].bootstrap)
    try:
        full = fetch_on(wire, 17, end, new_epoch, session_epoch=0)
        assert full.session_id != 0 and len(full.responses[0].partitions) == 1
        unchanged = fetch_on(wire, 17, end, new_epoch, full.session_id, 1)
        assert unchanged.responses == []  # nothing new: the partition is left out
        # at the log end, as before, but with the old epoch: no records and no new offsets, only the divergence
        diverged = fetch_on(wire, 17, end, old_epoch, full.session_id, 2)
        (data,) = diverged.responses[0].partitions
        assert (data.diverging_epoch.epoch, data.diverging_epoch.end_offset) == (old_epoch, FIRST)
        assert data.high_watermark == end and not data.records
    finally:
        wire.close()
