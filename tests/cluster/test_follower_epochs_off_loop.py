"""A follower whose fetch answer brings a new leader epoch to many partitions does not stall its event loop:
each partition's `leader-epoch-checkpoint` (two fsyncs) is written on the I/O threads, an answer's files
together, before the batches are appended (as Kafka's assign makes an epoch durable before its batches go
into the log), so the follower's other clients are answered meanwhile.

Two brokers, every partition led by broker 0 and followed by broker 1. While broker 1 is stopped (SIGSTOP), one
acks=all produce writes the first batch, at leader epoch 0, to every partition; broker 1 then resumes with all of
them in one fetch answer. The stall is observed by ordering alone: ApiVersions requests are sent to broker 1 one
after another until the produce is answered (once broker 1 has appended every batch, so after its checkpoints),
and those sent after some partition's checkpoint appeared on disk and answered before the last one did were
answered while the files were being written. With the writes on the loop (before this change) none can be (in
runs here: 0 of 7-27 answers, the longest round trip 1.1-1.9 s), against 57-194 of 113-304 with the change (the
longest 10-66 ms)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.log.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import RequestHeader, encode_request
from pybroker.protocol.messages import ListOffsetsRequest, ListOffsetsResponse, ProduceRequest, ProduceResponse
from pybroker.records.record import RecordInput, build_batch
from tests.cluster.conftest import running_cluster
from tests.eventually import eventually
from tests.integration.loop_answers import api_versions_until_answered
from tests.integration.test_bad_input import WireClient

PARTITIONS = 250
ANSWERED_WHILE_WRITING = 1
"""ApiVersions answered between the follower's first checkpoint file and its last: with the writes on the loop
(before the change) none can be, as the loop writes every file before it reads the next request; off the loop
57-194 on a quiet machine, 7 and 3 in CI runs (longest round trips 21 and 22 ms: the loop never held, the writes
were just over sooner)."""
TOPIC = "followed"
VERSION = 9
DEBUGGING_REPLICA = -2
"""ListOffsets from Kafka's debugging replica id: the log end, past the high watermark."""


def _send_produce_to_all(client: WireClient) -> None:
    client.correlation += 1
    header = RequestHeader(request_api_key=ProduceRequest.API_KEY, request_api_version=VERSION,
                           correlation_id=client.correlation, client_id="producer")
    client.sock.sendall(encode_request(header, ProduceRequest(acks=-1, timeout_ms=60_000, topic_data=[
        ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
            ProduceRequest.PartitionProduceData(index=index, records=build_batch([RecordInput(b"k", b"v")]))
            for index in range(PARTITIONS)])]), VERSION))


def _log_end(client: WireClient, partition: int) -> int:
    request = ListOffsetsRequest(replica_id=DEBUGGING_REPLICA, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=TOPIC, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=-1)])])
    return client.request(request, 4, ListOffsetsResponse).topics[0].partitions[0].offset


def test_a_follower_answers_other_clients_while_it_writes_new_leader_epochs(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=2) as cluster:
        leader, follower = cluster.brokers
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, replica_assignment=[[0, 1]] * PARTITIONS)])[TOPIC].result(60)
        follower_logs = Path(follower.data_dir, "logs")
        eventually(lambda: len(list(follower_logs.glob(f"{TOPIC}-*"))) == PARTITIONS,
                   "broker 1 to host every replica")
        checkpoints = [follower_logs / f"{TOPIC}-{index}" / LEADER_EPOCH_CHECKPOINT for index in range(PARTITIONS)]
        assert not any(path.exists() for path in checkpoints)  # a new follower's log has no epoch yet
        producer, pinger, leader_ends = (WireClient(b.bootstrap) for b in (leader, follower, leader))

        assert follower.process is not None
        os.kill(follower.process.pid, signal.SIGSTOP)
        try:
            _send_produce_to_all(producer)
            eventually(lambda: _log_end(leader_ends, PARTITIONS - 1) == 1, "the leader to append every batch")
        finally:
            os.kill(follower.process.pid, signal.SIGCONT)
        answers = api_versions_until_answered(pinger, producer,
                                              observe=lambda: sum(path.exists() for path in checkpoints))
        produced = ProduceResponse.decode(producer.read_frame()[5:], VERSION)  # flexible header: one tag byte
        assert [p.error_code for t in produced.responses for p in t.partition_responses] == \
            [ErrorCode.NONE] * PARTITIONS
        while_writing = sum(1 for before, after in answers.observed if before > 0 and after < PARTITIONS)
        assert while_writing >= ANSWERED_WHILE_WRITING, \
            f"{while_writing} of {answers.count} ApiVersions answered while the follower wrote its leader epochs " \
            f"(longest round trip {answers.longest_ms:.0f} ms)"
        # acks=all answered: the follower appended every batch, each after its epoch was durable.
        assert [LeaderEpochCheckpointFile(str(path)).read() for path in checkpoints] == [{0: 0}] * PARTITIONS
        assert not [line for line in follower.log_lines if "Traceback" in line or " ERROR " in line]
        print(f"{while_writing} of {answers.count} answered while writing, longest {answers.longest_ms:.0f} ms")
        for client in (producer, pinger, leader_ends):
            client.close()
