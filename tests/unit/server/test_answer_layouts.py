"""The Fetch and Produce handlers build their answers with positional arguments (a keyword call to a class costs
a dict per call on Python 3.11): each answer they build equals the one built by field name, so a generated class
whose field order changed fails here rather than on the wire."""

from __future__ import annotations

import uuid

from pybroker.log.results import AppendInfo
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import FetchResponse, ProduceResponse
from pybroker.records.errors import RecordValidationError
from pybroker.replication.append_records import PartitionAppend
from pybroker.replication.fetch_messages import FetchParams, PartitionRead
from pybroker.server.handlers import fetch, produce

TOPIC_ID = uuid.UUID(int=7)


def _wanted(error: ErrorCode = ErrorCode.NONE) -> fetch._Wanted:
    return fetch._Wanted("t", 3, 4, 100, -1, -1, -1, TOPIC_ID, (TOPIC_ID, 3), error)


def test_a_wanted_partition_is_built_as_by_name() -> None:
    """fetch._resolve builds it positionally: the read's fields, then the answer's."""
    assert _wanted(ErrorCode.UNKNOWN_TOPIC_ID) == fetch._Wanted(
        topic="t", index=3, fetch_offset=4, max_bytes=100, current_leader_epoch=-1, log_start_offset=-1,
        last_fetched_epoch=-1, topic_id=TOPIC_ID, key=(TOPIC_ID, 3), error=ErrorCode.UNKNOWN_TOPIC_ID)


def test_a_fetched_partition_answers_as_built_by_name() -> None:
    read = PartitionRead(None, 10, 9, 2, [(5, 6)], b"records")
    assert fetch._answer(_wanted(), read) == FetchResponse.PartitionData(
        partition_index=3, error_code=0, high_watermark=10, last_stable_offset=9, log_start_offset=2,
        aborted_transactions=[FetchResponse.AbortedTransaction(producer_id=5, first_offset=6)], records=b"records")
    assert fetch._answer(_wanted(), PartitionRead(None, 10, 9, 2, None, b"")).aborted_transactions is None


def test_a_refused_partition_answers_as_built_by_name() -> None:
    expected = FetchResponse.PartitionData(partition_index=3, error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                                           high_watermark=-1, last_stable_offset=-1, log_start_offset=-1, records=b"")
    assert fetch._error_data(_wanted(ErrorCode.UNKNOWN_TOPIC_ID)) == expected
    failed = fetch._answer(_wanted(), PartitionRead(error=ValueError("boom")))
    assert failed.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert failed == FetchResponse.PartitionData(
        partition_index=3, error_code=ErrorCode.UNKNOWN_SERVER_ERROR, high_watermark=-1, last_stable_offset=-1,
        log_start_offset=-1, records=b"")


def test_fetch_topics_and_params_keep_their_fields() -> None:
    data = fetch._error_data(_wanted(ErrorCode.UNKNOWN_TOPIC_ID))
    assert fetch._group([_wanted()], [data]) == [
        FetchResponse.FetchableTopicResponse(topic="t", topic_id=TOPIC_ID, partitions=[data])]
    assert FetchResponse(0, 0, 12, []) == FetchResponse(throttle_time_ms=0, error_code=0, session_id=12, responses=[])

    def limit() -> int:
        return 1

    assert FetchParams(5, True, 1, 500, limit) == FetchParams(replica_id=5, read_committed=True, min_bytes=1,
                                                               max_wait_ms=500, byte_limit=limit)


def test_a_produced_partition_answers_as_built_by_name() -> None:
    appended = PartitionAppend("t", 3, b"", info=AppendInfo(first_offset=40, last_offset=41, log_append_time=99,
                                                            log_start_offset=2, duplicate=False, max_timestamp=1,
                                                            offset_of_max_timestamp=40))
    assert produce._answer(appended) == ProduceResponse.PartitionProduceResponse(
        index=3, error_code=0, base_offset=40, log_append_time_ms=99, log_start_offset=2)
    assert produce._error(3, ErrorCode.NOT_LEADER_OR_FOLLOWER, "why") == ProduceResponse.PartitionProduceResponse(
        index=3, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, base_offset=-1, error_message="why")
    refused = RecordValidationError([(0, "x")], invalid_timestamp=False)
    invalid = produce._answer(PartitionAppend("t", 3, b"", error=refused))
    assert invalid.error_code == ErrorCode.INVALID_RECORD and invalid.error_message == str(refused)
    assert invalid.record_errors == [ProduceResponse.BatchIndexAndErrorMessage(batch_index=0,
                                                                              batch_index_error_message="x")]
    assert produce._error(3, ErrorCode.NONE, None).record_errors is not invalid.record_errors
    topic = ProduceResponse.TopicProduceResponse("t", TOPIC_ID, [invalid])
    assert topic == ProduceResponse.TopicProduceResponse(name="t", topic_id=TOPIC_ID, partition_responses=[invalid])
    assert ProduceResponse([topic], 0) == ProduceResponse(responses=[topic], throttle_time_ms=0)
