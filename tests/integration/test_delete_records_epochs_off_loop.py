"""DeleteRecords of many partitions does not stall the broker's event loop: each partition's
`leader-epoch-checkpoint`, whose epochs below the new log start are dropped, is written in the background on the
I/O threads (Kafka's truncateFromStartAsyncFlush), not by the request on the loop.

One produce puts a record at leader epoch 0 into every partition; DeleteRecords then moves every log start past
it, which turns each checkpoint's ``0 0`` into ``0 1``. The stall is observed by ordering alone: ApiVersions
requests are sent on another connection one after another until the files have the new entry, and those sent
after some file changed and answered before another did were answered while the files were being written.
With the writes on the loop (before this change) none can be (in runs here: 0 of 1 answer, its round trip
3.0-3.5 s), against 106-582 of 110-584 with the change (the longest 63-92 ms)."""

from __future__ import annotations

from pathlib import Path

from pybroker.log.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import RequestHeader, encode_request
from pybroker.protocol.messages import DeleteRecordsRequest, DeleteRecordsResponse, ProduceRequest, ProduceResponse
from pybroker.records.record import RecordInput, build_batch
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.loop_answers import answered, api_versions_until
from tests.integration.test_bad_input import WireClient
from tests.integration.test_topic_creation_off_loop import _create_answer, _send_create

PARTITIONS = 250
ANSWERED_WHILE_WRITING = 10
SAMPLE = 5
"""Every 5th file is watched: a stat of each before and after every ApiVersions, few enough to keep the pings
frequent. An answer between some watched file's replacement and another's is still one given while the files
were being written, which a loop writing them all in one step cannot give."""
TOPIC = "pruned"


def _produce_to_all(client: WireClient) -> None:
    answer = client.request(ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[
        ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
            ProduceRequest.PartitionProduceData(index=index, records=build_batch([RecordInput(b"k", b"v")]))
            for index in range(PARTITIONS)])]), 9, ProduceResponse)
    assert [p.error_code for t in answer.responses for p in t.partition_responses] == [ErrorCode.NONE] * PARTITIONS


def _send_delete_records(client: WireClient) -> None:
    client.correlation += 1
    header = RequestHeader(request_api_key=DeleteRecordsRequest.API_KEY, request_api_version=1,
                           correlation_id=client.correlation, client_id="deleter")
    client.sock.sendall(encode_request(header, DeleteRecordsRequest(timeout_ms=30_000, topics=[
        DeleteRecordsRequest.DeleteRecordsTopic(name=TOPIC, partitions=[
            DeleteRecordsRequest.DeleteRecordsPartition(partition_index=index, offset=1)
            for index in range(PARTITIONS)])]), 1))


def _replaced(paths: list[Path], inodes: list[int]) -> int:
    """How many of the files were replaced (a checkpoint is written to a new file renamed over the old one): a
    stat each, cheap enough to leave the pings frequent."""
    return sum(path.stat().st_ino != inode for path, inode in zip(paths, inodes))


def test_delete_records_of_many_partitions_leaves_the_loop_free_while_their_epoch_files_are_written(
        tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path).start()
    client, deleter, pinger = (WireClient(broker.bootstrap) for _ in range(3))
    try:
        _send_create(client, TOPIC, PARTITIONS)
        assert _create_answer(client).error_code == ErrorCode.NONE
        _produce_to_all(client)
        paths = [tmp_path / "logs" / f"{TOPIC}-{index}" / LEADER_EPOCH_CHECKPOINT for index in range(PARTITIONS)]
        assert [LeaderEpochCheckpointFile(str(path)).read() for path in paths] == [{0: 0}] * PARTITIONS
        watched = paths[::SAMPLE]
        inodes = [path.stat().st_ino for path in watched]

        _send_delete_records(deleter)
        answers = api_versions_until(pinger, lambda: _replaced(watched, inodes) == len(watched) and answered(deleter),
                                     observe=lambda: _replaced(watched, inodes))
        deleted = DeleteRecordsResponse.decode(deleter.read_frame()[4:], 1)
        assert [(p.error_code, p.low_watermark) for t in deleted.topics for p in t.partitions] == \
            [(ErrorCode.NONE, 1)] * PARTITIONS
        eventually(lambda: [LeaderEpochCheckpointFile(str(path)).read() for path in paths] == [{0: 1}] * PARTITIONS,
                   "every checkpoint written")
        while_writing = sum(1 for before, after in answers.observed if before > 0 and after < len(watched))
        assert while_writing >= ANSWERED_WHILE_WRITING, \
            f"{while_writing} of {answers.count} ApiVersions answered while the epoch files were written " \
            f"(longest round trip {answers.longest_ms:.0f} ms)"
        assert not [line for line in broker.log_lines if "Traceback" in line or " ERROR " in line]
        print(f"{while_writing} of {answers.count} answered while writing, longest {answers.longest_ms:.0f} ms")
    finally:
        for wire in (client, deleter, pinger):
            wire.close()
        broker.stop()

