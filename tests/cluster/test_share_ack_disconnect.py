"""An acknowledgement whose client goes away while its state write is under way is finished all the same, as
Kafka finishes a request whatever becomes of its connection: the write runs to its end and, when it fails, the
acknowledgement is rolled back (the records are the member's again), as Kafka's SharePartition rolls back the
state transitions of a failed write. Before, the disconnect cancelled the write half-way: the acknowledgement
stayed applied in the leader's memory, neither written nor rolled back.

The set-up of ``test_share_loads_at_once``: the topic is led by L, share-partition A's state is kept by broker C,
which is stopped (SIGSTOP) to hold A's write; the persister gives up on C after ``WRITE_TIMEOUT_MS``, so the held
write fails while C is stopped.
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import encode_request
from pybroker.protocol.messages import (
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    RequestHeader,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
)
from tests.cluster.test_share_loads_at_once import ACCEPT, EXTRA, GROUP, Setup, _produce, _setup, _share_fetch
from tests.eventually import eventually
from tests.integration.test_bad_input import WireClient

WRITE_TIMEOUT_MS = 3000


class _Member:
    """m1's ShareAcknowledges of A's records 0-1 from the test's client at L, each at the session's next epoch."""

    def __init__(self, setup: Setup, epoch: int) -> None:
        self.setup = setup
        self.epoch = epoch

    def acknowledge(self) -> list[ErrorCode]:
        """A's answer (in a list, so that NONE is truthy for ``eventually``); empty when the epoch was refused (the
        acknowledgement sent before it not taken yet), the epoch then offered again."""
        answer = self.setup.client.request(_acknowledgement(self.setup.topic_id, self.setup.a, self.epoch), 1,
                                           ShareAcknowledgeResponse)
        if answer.error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH:
            return []
        assert answer.error_code == ErrorCode.NONE, answer
        self.epoch += 1
        return [ErrorCode(answer.responses[0].partitions[0].error_code)]


def test_an_acknowledgement_whose_client_went_away_is_rolled_back_when_its_write_fails(tmp_path: Path) -> None:
    """m1 holds A's two records; with C stopped, a client sends m1's ShareAcknowledge of them and closes its
    connection while the write waits for C. The write fails (C does not answer in time) and the acknowledgement is
    undone: m1 can acknowledge the records again (before, they stayed acknowledged in L's memory: INVALID_RECORD_STATE
    at every try), and once C runs again that acknowledgement is written."""
    with _setup(tmp_path, {**EXTRA, "share.coordinator.write.timeout.ms": str(WRITE_TIMEOUT_MS)}) as setup:
        _produce(setup.client, setup.a, 2)
        assert _share_fetch(setup, 0, [setup.a], max_wait_ms=15_000) == {setup.a: (ErrorCode.NONE, [(0, 1, 1)])}
        member = _Member(setup, 2)
        host, port = setup.client.sock.getpeername()[:2]
        os.kill(setup.stopped, signal.SIGSTOP)
        try:
            gone = WireClient(f"{host}:{port}")
            _send(gone, _acknowledgement(setup.topic_id, setup.a, 1))
            # applied in L's memory, its write held by C: acknowledging the records again is refused
            first = eventually(member.acknowledge, "the acknowledgement of the client going away to be taken")
            assert first == [ErrorCode.INVALID_RECORD_STATE]
            gone.close()
            again = eventually(lambda: [c for c in member.acknowledge() if c != ErrorCode.INVALID_RECORD_STATE],
                               "the acknowledgement to be rolled back once its write failed")
            assert again != [ErrorCode.NONE]  # C still stopped: this write fails too, and is rolled back
        finally:
            os.kill(setup.stopped, signal.SIGCONT)
        eventually(lambda: member.acknowledge() == [ErrorCode.NONE], "m1's acknowledgement written")
        assert _start_offset_at_c(setup) == 2


@pytest.mark.parametrize("api", [ShareAcknowledgeRequest, ShareFetchRequest])
def test_a_session_closed_by_a_client_that_went_away_releases_the_members_records(
        tmp_path: Path, api: type[ShareAcknowledgeRequest] | type[ShareFetchRequest]) -> None:
    """m1 holds A's four records; with C stopped, a client sends m1's ShareAcknowledge (or ShareFetch) that accepts
    records 0-1 and closes m1's share session (epoch -1), and closes its connection while the write waits for C.
    Once C runs again the acknowledgement is written and the closing of the session releases records 2-3: a new
    session of m1 acquires them again long before their locks would run out. Before, the disconnect cancelled the
    request after the session was gone but before the release: records 2-3 stayed acquired (seen with
    ShareAcknowledge: nothing acquired for 20 s)."""
    extra = {**EXTRA, "group.share.record.lock.duration.ms": "60000"}
    with _setup(tmp_path, extra) as setup:
        _produce(setup.client, setup.a, 4)
        assert _share_fetch(setup, 0, [setup.a], max_wait_ms=15_000) == {setup.a: (ErrorCode.NONE, [(0, 3, 1)])}
        host, port = setup.client.sock.getpeername()[:2]
        os.kill(setup.stopped, signal.SIGSTOP)
        try:
            gone = WireClient(f"{host}:{port}")
            closing = _acknowledgement(setup.topic_id, setup.a, -1) if api is ShareAcknowledgeRequest \
                else _fetch_acknowledgement(setup.topic_id, setup.a, -1)
            _send(gone, closing)
            eventually(lambda: _session_error(setup) == ErrorCode.SHARE_SESSION_NOT_FOUND,
                       "the closing of m1's session to be taken")
            gone.close()
        finally:
            os.kill(setup.stopped, signal.SIGCONT)
        released = eventually(lambda: _share_fetch(setup, 0, [setup.a], max_wait_ms=0)[setup.a][1],
                              "records 2-3 to be released by the closing of the session", timeout=20)
        assert released == [(2, 3, 2)]
        assert _start_offset_at_c(setup) == 2


def _session_error(setup: Setup) -> ErrorCode:
    """The answer to a ShareAcknowledge of m1 at an epoch its open session never takes (a closed one: no session)."""
    answer = setup.client.request(ShareAcknowledgeRequest(group_id=GROUP, member_id="m1", share_session_epoch=1000,
                                                          topics=[]), 1, ShareAcknowledgeResponse)
    return ErrorCode(answer.error_code)


def _send(client: WireClient, request: ShareAcknowledgeRequest | ShareFetchRequest) -> None:
    """Send ``request`` (v1) without reading its answer."""
    client.sock.sendall(encode_request(RequestHeader(
        request_api_key=request.API_KEY, request_api_version=1, correlation_id=1, client_id="gone"), request, 1))


def _acknowledgement(topic_id: uuid.UUID, partition: int, epoch: int) -> ShareAcknowledgeRequest:
    R = ShareAcknowledgeRequest
    return R(group_id=GROUP, member_id="m1", share_session_epoch=epoch, topics=[R.AcknowledgeTopic(
        topic_id=topic_id, partitions=[R.AcknowledgePartition(partition_index=partition, acknowledgement_batches=[
            R.AcknowledgementBatch(first_offset=0, last_offset=1, acknowledge_types=[ACCEPT])])])])


def _fetch_acknowledgement(topic_id: uuid.UUID, partition: int, epoch: int) -> ShareFetchRequest:
    R = ShareFetchRequest
    return R(group_id=GROUP, member_id="m1", share_session_epoch=epoch, topics=[R.FetchTopic(
        topic_id=topic_id, partitions=[R.FetchPartition(partition_index=partition, acknowledgement_batches=[
            R.AcknowledgementBatch(first_offset=0, last_offset=1, acknowledge_types=[ACCEPT])])])])


def _state_at_c(setup: Setup) -> ReadShareGroupStateResponse.PartitionResult:
    """What C's share coordinator (the stopped broker, resumed) holds for A."""
    [c] = [b for b in setup.cluster.brokers if b.process is not None and b.process.pid == setup.stopped]
    client = WireClient(c.bootstrap)
    try:
        R = ReadShareGroupStateRequest
        found = client.request(R(group_id=GROUP, topics=[R.ReadStateData(topic_id=setup.topic_id, partitions=[
            R.PartitionData(partition=setup.a, leader_epoch=-1)])]), 0,
            ReadShareGroupStateResponse).results[0].partitions[0]
    finally:
        client.close()
    assert found.error_code == ErrorCode.NONE, found
    return found


def _start_offset_at_c(setup: Setup) -> int:
    """The start offset C's share coordinator holds for A."""
    return _state_at_c(setup).start_offset
