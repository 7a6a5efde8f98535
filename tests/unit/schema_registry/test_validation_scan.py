"""A produced batch's schema check in two steps: `scan` reads the records anywhere, `Scanned.judge` asks the
registry once per schema id on the loop; together they name the same records, with the same reasons, as
checking each record in turn: the first MAX_ERRORS_LISTED that fail, each with its first failing side's reason."""

from __future__ import annotations

import pytest

from pybroker.records.batch import RecordBatch
from pybroker.records.errors import RecordValidationError
from pybroker.records.record import RecordInput, build_batch
from pybroker.schema_registry.state import Content, RegistryState, Version
from pybroker.schema_registry.validation import MAX_ERRORS_LISTED, TOPIC_NAME, SchemaValidation, Side, scan

REGISTERED, UNKNOWN = 7, 8
SIDES = (Side(True, TOPIC_NAME), Side(False, TOPIC_NAME))


def registry() -> RegistryState:
    content = Content("AVRO", '{"type": "string"}', (), None, None)
    return RegistryState(contents={REGISTERED: content}, subjects={
        subject: {1: Version(subject, 1, REGISTERED, content, False)} for subject in ("t-key", "t-value")})


def framed(schema_id: int) -> bytes:
    return b"\0" + schema_id.to_bytes(4, "big") + b"payload"


def expected_reason(index: int) -> str | None:
    if index % 2:
        return "Record has no key but topic t validates keys"
    if index % 3 == 0:
        return "Record value does not start with the schema registry's magic byte and a schema id"
    if index % 5 == 0:
        return f"Schema id {UNKNOWN} of the record value is not registered"
    return None


@pytest.mark.parametrize("count", [40, 1_000])
def test_the_first_failing_records_are_named_with_their_first_failing_sides_reason(count: int) -> None:
    records = [RecordInput(None if i % 2 else framed(REGISTERED),
                           b"plain" if i % 3 == 0 else framed(UNKNOWN if i % 5 == 0 else REGISTERED))
               for i in range(count)]
    validation = SchemaValidation(registry)
    with pytest.raises(RecordValidationError) as refused:
        scan(SIDES, RecordBatch(build_batch(records))).judge(validation, "t")
    expected = [(i, reason) for i in range(count) if (reason := expected_reason(i)) is not None]
    assert refused.value.record_errors == expected[:MAX_ERRORS_LISTED]
    assert len(refused.value.record_errors) == min(len(expected), MAX_ERRORS_LISTED)


def test_records_of_registered_schemas_pass() -> None:
    batch = RecordBatch(build_batch([RecordInput(framed(REGISTERED), framed(REGISTERED))] * 500))
    scan(SIDES, batch).judge(SchemaValidation(registry), "t")  # raises nothing
    with pytest.raises(RecordValidationError):
        scan(SIDES, batch).judge(SchemaValidation(lambda: None), "t")  # the registry off: none can be checked
