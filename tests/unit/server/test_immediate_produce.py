"""The dispatcher answers a Produce that needs no wait in the read callback itself, with no coroutine (the
handler's first step, `ApiHandler.immediate`): acks 0 and 1, and acks=all on a partition whose ISR is the leader
alone. A Produce that waits (a batch checked off the loop or queued behind one, flush.messages, a transaction's
admission) gets a coroutine, and its batch still keeps its place among the partition's appends. A broker in this
process, its dispatcher called as a connection calls it."""

from __future__ import annotations

import asyncio
import types
from pathlib import Path

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import decode_response_header
from pybroker.protocol.messages import ProduceRequest, ProduceResponse
from pybroker.protocol.primitives import FramePart
from pybroker.records.record import build_batch
from pybroker.replication.append_records import OFF_LOOP_RECORDS
from pybroker.server.broker import Broker
from pybroker.server.context import ConnectionSession
from tests.eventually import eventually_async
from tests.unit.server.test_immediate_fetch import PEER, TOPIC, _frame, _run

VERSION = 9


def _produce(acks: int, records: bytes, topic: str = TOPIC, index: int = 0,
             transactional_id: str | None = None) -> memoryview:
    return _frame(ApiKey.PRODUCE, VERSION, ProduceRequest(
        transactional_id=transactional_id, acks=acks, timeout_ms=30_000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.PartitionProduceData(index=index, records=records)])]))


def _partition(parts: list[FramePart]) -> ProduceResponse.PartitionProduceResponse:
    frame = b"".join(bytes(part) for part in parts)  # type: ignore[arg-type]
    _, offset = decode_response_header(memoryview(frame)[4:], ApiKey.PRODUCE, VERSION)
    [topic] = ProduceResponse.decode(memoryview(frame)[4 + offset:], VERSION).responses
    [partition] = topic.partition_responses
    return partition


def _dispatch(broker: Broker, frame: memoryview) -> object:
    return broker.dispatcher.dispatch(frame, PEER, ConnectionSession())


def test_a_produce_that_needs_no_wait_is_answered_without_a_coroutine(tmp_path: Path) -> None:
    async def scenario(broker: Broker, _: object) -> None:
        for offset, acks in enumerate((1, -1)):
            outcome = _dispatch(broker, _produce(acks, build_batch([(None, b"x")])))
            assert type(outcome) is list, outcome
            answer = _partition(outcome)
            assert (answer.error_code, answer.base_offset) == (0, offset)
        assert _dispatch(broker, _produce(0, build_batch([(None, b"y")]))) is None
        assert broker.replica_manager.leader_partition(TOPIC, 0).log.log_end_offset == 3
        # refused partitions are answered at once too, with KIP-951's hint where it applies
        outcome = _dispatch(broker, _produce(1, build_batch([(None, b"z")]), index=5))
        assert type(outcome) is list, outcome
        assert _partition(outcome).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    _run(tmp_path, scenario)


def test_a_produce_behind_a_batch_checked_off_the_loop_waits_its_turn(tmp_path: Path) -> None:
    async def scenario(broker: Broker, _: object) -> None:
        big = _dispatch(broker, _produce(1, build_batch([(None, b"r")] * (OFF_LOOP_RECORDS + 1))))
        small = _dispatch(broker, _produce(1, build_batch([(None, b"s")])))
        assert isinstance(big, types.CoroutineType) and isinstance(small, types.CoroutineType)
        # each started as its connection starts it; the later one is answered only after the big batch's append
        big_task, small_task = asyncio.ensure_future(big), asyncio.ensure_future(small)
        small_answer = _partition(await asyncio.wait_for(small_task, 30))
        assert big_task.done()
        big_answer = _partition(big_task.result())
        assert (big_answer.error_code, big_answer.base_offset) == (0, 0)
        assert (small_answer.error_code, small_answer.base_offset) == (0, OFF_LOOP_RECORDS + 1)

    _run(tmp_path, scenario)


def test_a_produce_that_waits_for_flush_messages_is_a_coroutine(tmp_path: Path) -> None:
    async def scenario(broker: Broker, _: object) -> None:
        assert broker.metadata is not None
        await broker.metadata.create_topic("flushed", 1, 1, {"flush.messages": "1"})
        await eventually_async(lambda: (hosted := broker.replica_manager.hosted("flushed", 0)) is not None
                               and hosted.is_leader, "the partition is led here")
        outcome = _dispatch(broker, _produce(1, build_batch([(None, b"f")]), topic="flushed"))
        assert isinstance(outcome, types.CoroutineType), outcome
        assert _partition(await outcome).error_code == 0
        assert broker.replica_manager.leader_partition("flushed", 0).log.recovery_point == 1

    _run(tmp_path, scenario)


def test_a_transactional_produce_is_a_coroutine(tmp_path: Path) -> None:
    async def scenario(broker: Broker, _: object) -> None:
        outcome = _dispatch(broker, _produce(1, build_batch([(None, b"t")]), transactional_id="txn"))
        assert isinstance(outcome, types.CoroutineType), outcome
        answer = _partition(await outcome)  # a batch of no transaction: nothing for the coordinator to admit
        assert (answer.error_code, answer.base_offset) == (0, 0)

    _run(tmp_path, scenario)
