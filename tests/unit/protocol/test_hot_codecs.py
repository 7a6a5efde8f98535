"""The typed codecs of the hot messages (pybroker/protocol/hot_codecs.py, tools/gen_codecs.py) against the
generic ones of the same (class, version): they must take the usual messages themselves, and decode, encode
and refuse everything exactly as the generic codecs do (in whichever build runs the tests)."""

from __future__ import annotations

import dataclasses
import random
import uuid
from typing import Any

import pytest

from pybroker.protocol import hot_codecs
from pybroker.protocol.messages import FetchRequest, FetchResponse, ProduceRequest, ProduceResponse
from pybroker.protocol.primitives import Reader, Writer
from pybroker.protocol.schema import Read, Struct, Write, decode_budget, get_plan, use_typed_codecs
from tests.unit.protocol.protocol_samples import sample

READS = [(FetchRequest, v) for v in range(12, 18)] + [(ProduceRequest, v) for v in range(9, 13)]
WRITES = [(FetchResponse, v) for v in range(12, 18)] + [(ProduceResponse, v) for v in range(9, 13)]


def _key(cls: type, version: int) -> str:
    return f"{cls.__name__}_v{version}"


def _usual(obj: Any, version: int) -> Any:
    """``obj`` with every tagged field at its default (what clients send and the broker answers)."""
    if isinstance(obj, list):
        return [_usual(item, version) for item in obj]
    if not isinstance(obj, Struct):
        return obj
    defaults = {f.name: f for f in dataclasses.fields(obj)}
    changes = {}
    for spec in type(obj)._SCHEMA:
        field = defaults[spec.name]
        if spec.tag is not None and spec.tagged is not None and spec.tagged[0] <= version <= spec.tagged[1]:
            changes[spec.name] = field.default if field.default is not dataclasses.MISSING else \
                field.default_factory()  # type: ignore[misc]
        else:
            changes[spec.name] = _usual(getattr(obj, spec.name), version)
    return dataclasses.replace(obj, **changes)


def _outcome(read: Any, data: bytes, cls: type) -> tuple[Any, ...]:
    r = Reader(data, 0, decode_budget(cls))
    try:
        return "ok", read(r), r.pos
    except Exception as e:  # noqa: BLE001 - the outcome compared is the exception itself
        return "error", type(e), str(e)


@pytest.fixture(autouse=True, scope="module")
def _typed_codecs_in_front() -> None:
    """As the broker's dispatcher puts them when it starts."""
    use_typed_codecs(hot_codecs.codecs)


def test_the_hot_plans_carry_the_typed_codecs() -> None:
    for cls, version in READS:
        assert type(get_plan(cls, version).read).__name__ == f"{cls.__name__}V{version}"
    for cls, version in WRITES:
        assert type(get_plan(cls, version).write).__name__ == f"{cls.__name__}V{version}"
    assert type(get_plan(FetchRequest, 11).read).__name__ == "function"  # not flexible: the generic codec


def test_plans_compiled_before_other_typed_codecs_are_compiled_again() -> None:
    def generic_only(cls: type, version: int, read: Read, write: Write, element: Any) -> tuple[Read, Write]:
        return read, write

    typed = get_plan(FetchRequest, 12)
    use_typed_codecs(hot_codecs.codecs)
    assert get_plan(FetchRequest, 12) is typed  # the same codecs again: the plans stay
    try:
        use_typed_codecs(generic_only)
        assert type(get_plan(FetchRequest, 12).read).__name__ == "function"
    finally:
        use_typed_codecs(hot_codecs.codecs)
    assert type(get_plan(FetchRequest, 12).read).__name__ == "FetchRequestV12"


@pytest.mark.parametrize(("cls", "version"), READS)
def test_usual_requests_are_read_by_the_typed_codec(cls: type, version: int) -> None:
    rnd = random.Random(version)
    generic = get_plan(cls, version).read.slow  # type: ignore[attr-defined]
    for _ in range(30):
        data = _usual(sample(cls, version, rnd, null_rate=0.1), version).encode(version)
        typed = _outcome(hot_codecs.TYPED_READ[_key(cls, version)], data, cls)
        assert typed[0] == "ok", typed
        assert typed == _outcome(generic, data, cls)


@pytest.mark.parametrize(("cls", "version"), READS)
def test_every_request_decodes_as_the_generic_codec_has_it(cls: type, version: int) -> None:
    """Samples with tagged fields set, truncated at every length and with bytes changed: the same object
    and position, or the same error."""
    rnd = random.Random(100 + version)
    plan = get_plan(cls, version)
    generic = plan.read.slow  # type: ignore[attr-defined]
    for n in range(12):
        message = sample(cls, version, rnd, null_rate=0.3)
        data = (message if n % 2 else _usual(message, version)).encode(version)
        for cut in range(len(data) + 1):
            assert _outcome(plan.read, data[:cut], cls) == _outcome(generic, data[:cut], cls)
        for _ in range(60):
            changed = bytearray(data)
            changed[rnd.randrange(len(data))] = rnd.choice([0, 1, 0x7F, 0x80, 0xFF, rnd.randrange(256)])
            assert _outcome(plan.read, bytes(changed), cls) == _outcome(generic, bytes(changed), cls)


def test_long_names_many_partitions_and_a_small_budget_take_the_generic_path() -> None:
    request = FetchRequest(topics=[FetchRequest.FetchTopic(topic="t" * 200, partitions=[
        FetchRequest.FetchPartition(partition=p) for p in range(130)])], rack_id="ü" * 50)
    data = request.encode(12)
    assert FetchRequest.decode(data, 12) == request
    small = Reader(data, 0, 2000)
    with pytest.raises(Exception) as typed:
        get_plan(FetchRequest, 12).read(small)
    with pytest.raises(Exception) as generic:
        get_plan(FetchRequest, 12).read.slow(Reader(data, 0, 2000))  # type: ignore[attr-defined]
    assert (type(typed.value), str(typed.value)) == (type(generic.value), str(generic.value))
    assert "budget" in str(typed.value)


def _written(write: Any, obj: Any, version: int) -> tuple[Any, ...]:
    w = Writer()
    w.buf += b"prefix"
    try:
        write(w, obj)
    except Exception as e:  # noqa: BLE001 - the outcome compared is the exception itself
        return "error", type(e), str(e), bytes(w.buf)
    return "ok", w.getvalue(), [(pos, id(hole)) for pos, hole in w.holes]


@pytest.mark.parametrize(("cls", "version"), WRITES)
def test_responses_encode_as_the_generic_codec_has_them(cls: type, version: int) -> None:
    rnd = random.Random(200 + version)
    key = _key(cls, version)
    generic = get_plan(cls, version).write.slow  # type: ignore[attr-defined]
    for n in range(40):
        message = sample(cls, version, rnd, null_rate=0.3)
        usual = _usual(message, version)
        typed = _written(hot_codecs.TYPED_WRITE[key], usual, version)
        assert typed[0] == "ok" and typed == _written(generic, usual, version)
        assert _written(get_plan(cls, version).write, message, version) == _written(generic, message, version)


class _Range:
    """A file range a records field stands for (primitives.Spliced)."""

    size = 5

    def read(self) -> bytes:
        return b"12345"


@pytest.mark.parametrize("version", [12, 16])
def test_fetch_answers_with_file_ranges_and_bad_values(version: int) -> None:
    plan = get_plan(FetchResponse, version)
    generic = plan.write.slow  # type: ignore[attr-defined]
    spliced = _Range()

    def answer(**partition: Any) -> FetchResponse:
        return FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
            topic="t", topic_id=uuid.UUID(int=7), partitions=[FetchResponse.PartitionData(**partition)])])

    usual = answer(partition_index=1, records=spliced)
    assert _written(hot_codecs.TYPED_WRITE[_key(FetchResponse, version)], usual, version)[0] == "ok"
    cases = [usual, answer(partition_index=1, records=None), answer(partition_index="one"),
             answer(partition_index=1 << 40), answer(current_leader=FetchResponse.LeaderIdAndEpoch(3, 4)),
             answer(aborted_transactions=[FetchResponse.AbortedTransaction(1, 2)] * 200),
             FetchResponse(responses=None), FetchResponse(responses=[None])]  # type: ignore[arg-type]
    for case in cases:  # what a failed typed write appended is gone before the generic one writes
        assert _written(plan.write, case, version) == _written(generic, case, version), case


def test_produce_answers_with_errors_and_leader_hints() -> None:
    plan = get_plan(ProduceResponse, 10)
    generic = plan.write.slow  # type: ignore[attr-defined]
    partition = ProduceResponse.PartitionProduceResponse
    cases = [ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(name="t", partition_responses=[
        partition(index=0, error_code=6, current_leader=ProduceResponse.LeaderIdAndEpoch(2, 5)),
        partition(index=1, error_code=87, record_errors=[ProduceResponse.BatchIndexAndErrorMessage(0, "bad")],
                  error_message="refused"),
        partition(index=2, error_message=None)])],
        node_endpoints=[ProduceResponse.NodeEndpoint(2, "h", 9092, None)])]
    cases.append(dataclasses.replace(cases[0], node_endpoints=[]))
    cases.append(ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(name=None)]))  # type: ignore[arg-type]
    for case in cases:
        assert _written(plan.write, case, 10) == _written(generic, case, 10), case


def test_responses_framed_again_keep_the_version_check() -> None:
    """frame.py caches a class's body writer per version only once Message.write accepted that version."""
    from pybroker.protocol.errors import EncodeError
    from pybroker.protocol.frame import EncodedBody, encode_response_parts

    response = ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(name="t")])
    for _ in range(2):
        with pytest.raises(EncodeError, match="does not support version 99"):
            encode_response_parts(1, 0, 99, response)
        first = b"".join(bytes(part) for part in encode_response_parts(1, 0, 10, response))  # type: ignore[arg-type]
        assert first[9:] == response.encode(10)  # size, correlation id, empty tagged fields
    body = EncodedBody(10, response.encode(10))
    assert b"".join(bytes(p) for p in encode_response_parts(1, 0, 10, body)) == first  # type: ignore[arg-type]
    with pytest.raises(EncodeError, match="cannot be sent at version 9"):
        encode_response_parts(1, 0, 9, body)
