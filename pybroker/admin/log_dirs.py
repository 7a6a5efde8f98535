"""`pybroker log-dirs --describe`: each broker's log directories as JSON, as kafka-log-dirs.sh.

Output is Kafka's LogDirsCommand's: ``Querying brokers for log directories information``,
``Received log directory information from brokers 0,1``, then one JSON line
``{"brokers":[{"broker":0,"logDirs":[{"partitions":[{"partition":"t-0","size":0,"offsetLag":0,
"isFuture":false}],"error":null,"logDir":"/data"}]}],"version":1}``. Kafka builds that JSON from Java
HashMaps, so the keys, the log dirs and the partitions come out in HashMap order; `java_hash_order`
reproduces it so the output matches line for line. The error is the Java exception's class name
(``org.apache.kafka.common.errors.KafkaStorageException`` for an offline dir). ``--topic-list``
filters what is printed (every partition is asked for, as Kafka's tool does); a broker in
``--broker-list`` that is not in the cluster is an error naming the brokers that are.
"""

from __future__ import annotations

import argparse
import json
from typing import Callable, Sequence, TypeVar

from pybroker.client.command_line import (
    ClientSettings,
    CommandError,
    ToolParser,
    UsageError,
    add_connection_arguments,
    run_client,
    run_tool,
)
from pybroker.client import KafkaClient
from pybroker.client.errors import ResponseError
from pybroker.client.log_dirs_admin import LogDirDescription, describe_log_dirs

T = TypeVar("T")
_HASH_MAP_LOAD_FACTOR = 0.75


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker log-dirs",
                        description="This tool helps to query log directory usage on the specified brokers.")
    add_connection_arguments(parser)
    parser.add_argument("--describe", action="store_true",
                        help="Describe the specified log directories on the specified brokers.")
    parser.add_argument("--topic-list", default="", metavar="TOPICS",
                        help='The list of topics to be queried in the form "topic1,topic2,topic3". '
                             "All topics will be queried if no topic list is specified")
    parser.add_argument("--broker-list", default="", metavar="BROKERS",
                        help='The list of brokers to be queried in the form "0,1,2". '
                             "All brokers in the cluster will be queried if no broker list is specified")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool(build_parser(), argv, "log-dirs-tool", "", command)


def command(args: argparse.Namespace, settings: ClientSettings) -> None:
    if not args.describe:
        raise UsageError("Missing required argument \"[describe]\"")
    topics = {t for t in args.topic_list.split(",") if t}
    try:
        brokers = {int(b) for b in args.broker_list.split(",") if b}
    except ValueError as exc:
        raise UsageError(f"--broker-list: {exc}") from None
    run_client(settings, lambda client: _describe(client, brokers, topics))


async def _describe(client: KafkaClient, brokers: set[int], topics: set[str]) -> None:
    await client.metadata([])
    cluster = set(client.brokers)
    missing = brokers - cluster
    if missing:
        raise CommandError(f"ERROR: The given brokers do not exist from --broker-list: {_ids(missing)}. "
                           f"Current existent brokers: {_ids(cluster)}")
    queried = brokers or cluster
    print("Querying brokers for log directories information", flush=True)
    descriptions = await describe_log_dirs(client, sorted(queried))
    print(f"Received log directory information from brokers {_ids(queried)}")
    print(format_json(descriptions, topics))


def _ids(ids: set[int]) -> str:
    return ",".join(str(i) for i in sorted(ids))


def format_json(descriptions: dict[int, list[LogDirDescription]], topics: set[str]) -> str:
    """Kafka's formatAsJson: brokers, their log dirs and partitions in Java HashMap order."""
    brokers = [{"broker": broker_id, "logDirs": [_log_dir(d, topics) for d in
                                                 java_hash_order(dirs, lambda d: _string_hash(d.path))]}
               for broker_id, dirs in sorted(descriptions.items())]
    return json.dumps({"brokers": brokers, "version": 1}, separators=(",", ":"))


def _log_dir(description: LogDirDescription, topics: set[str]) -> dict[str, object]:
    replicas = [(tp, info) for tp, info in description.replicas.items() if not topics or tp.topic in topics]
    ordered = java_hash_order(replicas, lambda item: 31 * (31 + item[0].partition) + _string_hash(item[0].topic))
    return {"partitions": [{"partition": str(tp), "size": info.size, "offsetLag": info.offset_lag,
                            "isFuture": info.is_future} for tp, info in ordered],
            "error": _exception_class(description.error), "logDir": description.path}


def _exception_class(error: ResponseError | None) -> str | None:
    if error is None:
        return None
    words = error.code.name.split("_")
    if words[-1] in ("EXCEPTION", "ERROR", "FAILED"):  # KAFKA_STORAGE_ERROR is KafkaStorageException
        words.pop()
    return "org.apache.kafka.common.errors." + "".join(w.capitalize() for w in words) + "Exception"


def java_hash_order(items: Sequence[T], hash_code: Callable[[T], int]) -> list[T]:
    """``items`` in the iteration order of a java.util.HashMap they were put into in this order: by bucket
    (the spread hash masked by the table size, grown from 16 while over 3/4 full), ties in insertion order."""
    capacity = 16
    while len(items) > capacity * _HASH_MAP_LOAD_FACTOR:
        capacity *= 2

    def bucket(item: T) -> int:
        h = hash_code(item) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(items, key=bucket)


def _string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units)."""
    h = 0
    encoded = text.encode("utf-16-be")
    for i in range(0, len(encoded), 2):
        h = (31 * h + int.from_bytes(encoded[i:i + 2], "big")) & 0xFFFFFFFF
    return h
