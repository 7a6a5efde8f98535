"""`pybroker delete-records`: delete partitions' records before given offsets, as kafka-delete-records.sh.

The JSON file is Kafka's: ``{"partitions": [{"topic": "t", "partition": 0, "offset": 10}], "version": 1}``
(offset -1 means the high watermark; a missing version means 1). The output is Kafka's
DeleteRecordsCommand's: two progress lines, then ``partition: t-0<TAB>low_watermark: 10`` per partition,
or ``partition: t-0<TAB>error: <exception>: <message>``; failed partitions do not change the exit code.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Sequence

from pybroker.client.command_line import (
    ClientSettings,
    CommandError,
    ToolParser,
    UsageError,
    add_connection_arguments,
    run_admin,
    run_tool,
)
from pybroker.client.admin import DeletedRecords
from pybroker.client.errors import ResponseError
from pybroker.common.topic import TopicPartition

ERROR_PREFIX = "Error: "
SUPPORTED_VERSION = 1
JSON_FORMAT = '{"partitions":\n  [{"topic": "foo", "partition": 1, "offset": 1}],\n "version":1\n}'


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker delete-records",
                        description="Delete records of the given partitions down to the specified offset.")
    add_connection_arguments(parser)
    parser.add_argument("--offset-json-file", metavar="FILE",
                        help=f"the JSON file with the offset per partition (required); the format is:\n{JSON_FORMAT}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool(build_parser(), argv, "pybroker-delete-records", ERROR_PREFIX, command)


def command(args: argparse.Namespace, settings: ClientSettings) -> None:
    if not args.offset_json_file:
        raise UsageError("--offset-json-file must be specified")
    try:
        with open(args.offset_json_file, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise UsageError(f"Cannot read {args.offset_json_file}: {exc.strerror}") from None
    offsets = parse_offsets(text)
    print("Executing records delete operation", flush=True)
    results = run_admin(settings, lambda admin: admin.delete_records(offsets, timeout_ms=int(settings.timeout_s * 1000)))
    print("Records delete operation completed:")
    for tp in offsets:
        print(f"partition: {tp}\t{_outcome(results[tp])}")


def parse_offsets(text: str) -> dict[TopicPartition, int]:
    """Kafka's parseOffsetJsonStringWithoutDedup, then its duplicate check; CommandError when unusable."""
    try:
        document = json.loads(text)
    except ValueError:
        raise CommandError("The input string is not a valid JSON") from None
    if not isinstance(document, dict):
        raise CommandError("The input string is not a valid JSON object")
    version = document.get("version", SUPPORTED_VERSION)
    if version != SUPPORTED_VERSION:
        raise CommandError(f"Not supported version field value {version}")
    if "partitions" not in document:
        raise CommandError("Missing partitions field")
    offsets: dict[TopicPartition, int] = {}
    duplicates: list[TopicPartition] = []
    for entry in _entries(document["partitions"]):
        tp = TopicPartition(_field(entry, "topic", str), _field(entry, "partition", int))
        if tp in offsets and tp not in duplicates:
            duplicates.append(tp)
        offsets[tp] = _field(entry, "offset", int)
    if duplicates:
        raise CommandError("Offset json file contains duplicate topic partitions: "
                           + ",".join(str(tp) for tp in duplicates))
    return offsets


def _entries(partitions: Any) -> list[dict[str, Any]]:
    if not isinstance(partitions, list) or not all(isinstance(p, dict) for p in partitions):
        raise CommandError("The partitions field must be an array of objects")
    return partitions


def _field(entry: dict[str, Any], name: str, kind: type) -> Any:
    value = entry.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise CommandError(f"Expected a {kind.__name__} value for {name!r}, received {value!r}")
    return value


def _outcome(result: DeletedRecords) -> str:
    if result.error is None:
        return f"low_watermark: {result.low_watermark}"
    return f"error: {_exception_name(result.error)}: {result.error}"


def _exception_name(error: ResponseError) -> str:
    """The Java client's exception class for the code, as Kafka's tool prints it (ExecutionException's message)."""
    words = error.code.name.split("_")
    if words[-1] == "EXCEPTION":
        words.pop()
    return "org.apache.kafka.common.errors." + "".join(w.capitalize() for w in words) + "Exception"
