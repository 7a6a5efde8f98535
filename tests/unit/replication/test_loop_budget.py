"""Which produced batches the event loop checks itself (`loop_budget`), on the real validation.

A batch is handed to an I/O thread when its records count is past OFF_LOOP_RECORDS (read from the header,
before anything is decompressed) or its records pass the codec's byte budget; W1's batches (librdkafka's 1 MiB
batch.size of 100-byte records) stay on the loop in the compiled build, where the hand-off cost more than the
check.
"""

from __future__ import annotations

import pytest

from pybroker.records.batch import RecordBatch, validate_batch
from pybroker.records.constants import Compression
from pybroker.records.record import RecordInput, build_batch
from pybroker.records.validation import COMPILED_WALK, OverBudget, ProducePolicy, validate_produced_batch
from pybroker.replication.append_records import OFF_LOOP_BYTES, OFF_LOOP_RECORDS, loop_budget

ALL_CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
FAST_CODECS = [Compression.NONE, Compression.SNAPPY, Compression.LZ4]
SLOW_CODECS = [Compression.GZIP, Compression.ZSTD]


def batch_of(count: int, value_size: int, codec: Compression) -> RecordBatch:
    data = build_batch([RecordInput(None, b"x" * value_size, timestamp=1000 + i) for i in range(count)],
                       compression=codec)
    return validate_batch(data, 0, max_size=64 << 20, check_counts=False)


def checked_on_loop(batch: RecordBatch) -> bool:
    header = batch.header()
    try:
        validate_produced_batch(batch, ProducePolicy(), 0, "t-0", header, loop_budget(header))
    except OverBudget:
        return False
    return True


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_as_many_small_records_as_the_loop_takes_are_checked_on_it(codec: Compression) -> None:
    assert checked_on_loop(batch_of(OFF_LOOP_RECORDS, 1, codec))


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4, Compression.GZIP])
def test_one_record_more_goes_to_a_thread(codec: Compression) -> None:
    assert not checked_on_loop(batch_of(OFF_LOOP_RECORDS + 1, 1, codec))


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_past_its_codecs_byte_budget_a_batch_goes_to_a_thread(codec: Compression) -> None:
    size = OFF_LOOP_BYTES // 64
    assert not checked_on_loop(batch_of(80, size, codec))  # 1.25x OFF_LOOP_BYTES of records
    within = batch_of(40, size, codec)  # 0.625x: within the fast codecs' budget, past the slow ones' quarter
    assert checked_on_loop(within) == (codec in FAST_CODECS)


@pytest.mark.skipif(not COMPILED_WALK, reason="the pure build's walk is too slow to take W1's batches on the loop")
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_w1s_batches_stay_on_the_loop_in_the_compiled_build(codec: Compression) -> None:
    # librdkafka's batch.size 1 MiB, 100-byte values: about 9,200 records of 113 bytes here.
    batch = batch_of(OFF_LOOP_BYTES // 114, 100, codec)
    assert batch.header().records_count > 9_000
    assert checked_on_loop(batch)
