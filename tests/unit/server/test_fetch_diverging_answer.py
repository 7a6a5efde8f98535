"""A diverging read's answer (KIP-320), built positionally by the Fetch handler, equals the one built by field
name (as tests/unit/server/test_answer_layouts.py checks for the other answers)."""

from __future__ import annotations

from pybroker.protocol.messages import FetchResponse
from pybroker.replication.fetch_messages import PartitionRead
from pybroker.server.handlers import fetch
from tests.unit.server.test_answer_layouts import _wanted


def test_a_diverging_partition_answers_its_epoch_and_end_offset_and_no_records() -> None:
    read = PartitionRead(None, 10, 9, 2, None, b"", (3, 7))
    assert fetch._answer(_wanted(), read) == FetchResponse.PartitionData(
        partition_index=3, error_code=0, high_watermark=10, last_stable_offset=9, log_start_offset=2,
        diverging_epoch=FetchResponse.EpochEndOffset(epoch=3, end_offset=7), aborted_transactions=None, records=b"")
