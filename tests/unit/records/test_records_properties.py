"""Property test: random records round-trip through build_batch / records() per codec."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KpBatch

from pybroker.records import (
    Compression,
    Record,
    RecordBatch,
    RecordInput,
    TimestampType,
    build_batch,
    iter_batches,
    set_base_offset,
    set_partition_leader_epoch,
    validate_batch,
)

blobs = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=12), blobs), max_size=4).map(tuple)
records = st.lists(
    st.builds(RecordInput, blobs, blobs, headers, st.integers(0, 2**42)),
    min_size=1,
    max_size=25,
)


@pytest.mark.parametrize("codec", list(Compression))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    recs=records,
    base_offset=st.integers(0, 2**62),
    epoch=st.integers(-1, 2**31 - 1),
    ts_type=st.sampled_from(list(TimestampType)),
)
def test_roundtrip(
    codec: Compression,
    recs: list[RecordInput],
    base_offset: int,
    epoch: int,
    ts_type: TimestampType,
) -> None:
    data = build_batch(recs, compression=codec, timestamp_type=ts_type)
    buf = bytearray(data)
    set_base_offset(buf, 0, base_offset)
    set_partition_leader_epoch(buf, 0, epoch)
    b = validate_batch(buf, max_size=len(buf))
    assert b.compression is codec and b.timestamp_type is ts_type
    assert b.records_count == len(recs) and b.last_offset == base_offset + len(recs) - 1
    max_ts = max(r.timestamp or 0 for r in recs)
    assert b.max_timestamp == max_ts
    want = [
        Record(
            base_offset + i,
            max_ts if ts_type is TimestampType.LOG_APPEND_TIME else r.timestamp or 0,
            r.key,
            r.value,
            tuple(r.headers),
        )
        for i, r in enumerate(recs)
    ]
    assert b.records() == want
    # an independent reader agrees
    kp = KpBatch(bytes(buf))
    assert kp.validate_crc()
    assert [(r.offset, r.key, r.value) for r in kp] == [(w.offset, w.key, w.value) for w in want]


@settings(max_examples=40, deadline=None)
@given(st.lists(records, min_size=1, max_size=5), st.integers(0, 2000))
def test_iter_batches_any_cut(batches: list[list[RecordInput]], cut: int) -> None:
    parts = [build_batch(r) for r in batches]
    full = b"".join(parts)
    buf = full[: min(cut * 7, len(full))]
    ends = []
    pos = 0
    for p in parts:
        pos += len(p)
        ends.append(pos)
    complete = [e for e in ends if e <= len(buf)]
    got = list(iter_batches(buf))
    assert len(got) == len(complete)
    assert all(RecordBatch(buf, g.position).is_valid() for g in got)
