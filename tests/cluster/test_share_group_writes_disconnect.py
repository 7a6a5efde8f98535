"""A share group's change whose client goes away while its ``__consumer_offsets`` write waits is finished all the
same, as Kafka finishes a request whatever becomes of its connection: DeleteGroups deletes the group,
AlterShareGroupOffsets sets the start offset, DeleteShareGroupOffsets deletes the topic's state
(``ShareService.delete_group``, ``ShareOffsets.alter`` and ``ShareOffsets.delete`` finish once started). Each is
a series of steps (record the change, write it, then change the share coordinator's state, write again): cancelled
at the first write, the request would leave the change recorded and never carried out.

``__consumer_offsets`` has three replicas, and a write is answered once every replica in the ISR has it: with a
follower of the group's coordinator stopped (SIGSTOP), the coordinator's write waits, appended to its log but not
replicated (its log end above its high watermark). The request is sent from 127.0.0.2, where the coordinator takes
one connection at a time (``max.connections.per.ip.overrides``): once a second connection from there is taken, the
coordinator has dropped the first and cancelled its request. The follower then runs again, and the test checks
that the change took effect.
"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path
from typing import Iterator

import pytest

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import FrameDecoder, encode_request
from pybroker.protocol.messages import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    ApiVersionsRequest,
    ApiVersionsResponse,
    DeleteGroupsRequest,
    DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    RequestHeader,
)
from pybroker.protocol.schema import Message
from tests.cluster.conftest import Cluster, running_cluster
from tests.cluster.test_cluster import create_topic, wait_for_full_isr
from tests.cluster.test_share_failover import GROUP_KEY, _broker, _coordinator
from tests.eventually import eventually
from tests.integration.test_bad_input import WireClient

TOPIC = "share-writes-held"
GONE_HOST = "127.0.0.2"
OFFSETS = "__consumer_offsets"
LATEST, DEBUGGING_REPLICA = -1, -2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    extra = {"offsets.topic.replication.factor": "3", "max.connections.per.ip.overrides": f"{GONE_HOST}:1",
             # the stopped follower stays in the ISR (and registered) while the test runs
             "replica.lag.time.max.ms": "60000", "zookeeper.session.timeout.ms": "30000"}
    with running_cluster(tmp_path_factory.mktemp("cluster"), extra=extra) as running:
        create_topic(running, TOPIC, 1)
        wait_for_full_isr(running, TOPIC)
        yield running


class _Held:
    """The group's coordinator and one of its followers, found for ``group`` (``__consumer_offsets`` created)."""

    def __init__(self, cluster: Cluster, group: str) -> None:
        self.cluster = cluster
        self.coordinator = _coordinator(cluster, group, GROUP_KEY)
        wait_for_full_isr(cluster, OFFSETS)
        self.follower = next(b for b in range(len(cluster.brokers)) if b != self.coordinator)
        self.client = _broker(cluster, self.coordinator)

    def send_and_go_away(self, message: Message, version: int) -> None:
        """Stop the follower, send ``message`` from 127.0.0.2, wait until the coordinator's write for it waits for
        the follower, close the connection and wait until the coordinator has dropped it; then the follower runs
        again."""
        process = self.cluster.brokers[self.follower].process
        assert process is not None
        os.kill(process.pid, signal.SIGSTOP)
        try:
            gone = self._connect_from_gone_host()
            gone.sendall(encode_request(RequestHeader(request_api_key=message.API_KEY, request_api_version=version,
                                                      correlation_id=1, client_id="gone"), message, version))
            eventually(self._write_waits, "the coordinator's write to wait for the stopped follower")
            gone.close()
            eventually(self._gone_host_taken_again, "the coordinator to drop the connection that went away")
            assert self._write_waits()  # the request was cancelled while its write waited
        finally:
            os.kill(process.pid, signal.SIGCONT)
        eventually(lambda: not self._write_waits(), "the follower to catch up")

    def _connect_from_gone_host(self) -> socket.socket:
        host, port = self.cluster.brokers[self.coordinator].bootstrap.split(":")
        return socket.create_connection((host, int(port)), timeout=10, source_address=(GONE_HOST, 0))

    def _gone_host_taken_again(self) -> bool:
        """Whether a new connection from 127.0.0.2 is served (the only one the coordinator allows from there)."""
        try:
            client = _FromGoneHost(self._connect_from_gone_host())
            try:
                return client.request(ApiVersionsRequest(), 0, ApiVersionsResponse).error_code == ErrorCode.NONE
            finally:
                client.close()
        except OSError:  # ConnectionError too: refused, the first connection still counted
            return False

    def _write_waits(self) -> bool:
        """Whether the coordinator has records of ``__consumer_offsets`` not yet replicated (log end above the
        high watermark) in a partition it leads."""
        ends = [self._offsets(DEBUGGING_REPLICA), self._offsets(-1)]
        return any(ends[0][p] > ends[1][p] for p in ends[0] if p in ends[1])

    def _offsets(self, replica_id: int) -> dict[int, int]:
        R = ListOffsetsRequest
        answer = self.client.request(R(replica_id=replica_id, topics=[R.ListOffsetsTopic(name=OFFSETS, partitions=[
            R.ListOffsetsPartition(partition_index=p, timestamp=LATEST) for p in range(3)])]), 7, ListOffsetsResponse)
        return {p.partition_index: p.offset for t in answer.topics for p in t.partitions
                if p.error_code == ErrorCode.NONE}

    def alter(self, group: str, start: int) -> None:
        answer = self.client.request(_alter(group, start), 0, AlterShareGroupOffsetsResponse)
        assert answer.error_code == 0 and answer.responses[0].partitions[0].error_code == 0, answer

    def start_offset(self, group: str) -> int:
        """The group's start offset of the topic's partition 0 (-1 without state)."""
        R = DescribeShareGroupOffsetsRequest
        answer = self.client.request(R(groups=[R.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=[
            R.DescribeShareGroupOffsetsRequestTopic(topic_name=TOPIC, partitions=[0])])]), 0,
            DescribeShareGroupOffsetsResponse)
        described = answer.groups[0]
        assert described.error_code == 0, described
        return described.topics[0].partitions[0].start_offset

    def share_groups(self) -> set[str]:
        answer = self.client.request(ListGroupsRequest(types_filter=["share"]), 5, ListGroupsResponse)
        return {g.group_id for g in answer.groups}


class _FromGoneHost(WireClient):
    """A WireClient on a socket connected already (from 127.0.0.2)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.decoder = FrameDecoder(1024 * 1024)
        self.correlation = 0
        self.frames: list[memoryview] = []


def _alter(group: str, start: int) -> AlterShareGroupOffsetsRequest:
    R = AlterShareGroupOffsetsRequest
    return R(group_id=group, topics=[R.AlterShareGroupOffsetsRequestTopic(topic_name=TOPIC, partitions=[
        R.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=start)])])


def test_an_offset_alter_whose_client_went_away_sets_the_start_offset(cluster: Cluster) -> None:
    """AlterShareGroupOffsets of a new group, its client gone while the group's first write waits: the share
    coordinator's state is initialized at the new start offset all the same (before, the request stopped at that
    write, the partition recorded as initializing and never initialized)."""
    held = _Held(cluster, "held-alter")
    held.send_and_go_away(_alter("held-alter", 7), 0)
    assert eventually(lambda: held.start_offset("held-alter") == 7, "the start offset to be set")


def test_an_offset_deletion_whose_client_went_away_deletes_the_state(cluster: Cluster) -> None:
    """DeleteShareGroupOffsets of the topic, its client gone while the write recording the topic as deleting waits:
    the share coordinator's state of the partition is deleted all the same (before, it stayed, the topic recorded
    as deleting)."""
    held = _Held(cluster, "held-delete-offsets")
    held.alter("held-delete-offsets", 3)
    assert held.start_offset("held-delete-offsets") == 3
    R = DeleteShareGroupOffsetsRequest
    held.send_and_go_away(R(group_id="held-delete-offsets", topics=[
        R.DeleteShareGroupOffsetsRequestTopic(topic_name=TOPIC)]), 0)
    assert eventually(lambda: held.start_offset("held-delete-offsets") == -1, "the topic's state to be deleted")


def test_a_group_deletion_whose_client_went_away_deletes_the_group(cluster: Cluster) -> None:
    """DeleteGroups of an empty share group with state, its client gone while the write recording its topics as
    deleting waits: the group is deleted all the same, its state and then its records (before, the group stayed)."""
    held = _Held(cluster, "held-delete-group")
    held.alter("held-delete-group", 5)
    assert "held-delete-group" in held.share_groups()
    held.send_and_go_away(DeleteGroupsRequest(groups_names=["held-delete-group"]), 2)
    assert eventually(lambda: "held-delete-group" not in held.share_groups(), "the group to be deleted")
