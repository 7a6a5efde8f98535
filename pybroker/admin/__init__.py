"""Command-line tools in the style of Kafka's `bin/kafka-*.sh`, as `pybroker` subcommands.

They reach brokers only through :mod:`pybroker.client` (over the wire), never broker internals.
Each tool module has `main(argv) -> exit code`.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Callable

EXIT_BROKEN_PIPE = 1

#: subcommand -> (module under pybroker.admin, one-line help); modules are imported on use only.
TOOLS: dict[str, tuple[str, str]] = {
    "topics": ("topics", "create, list, describe, alter and delete topics (kafka-topics.sh)"),
    "acls": ("acls", "add, remove and list ACLs (kafka-acls.sh)"),
    "broker-api-versions": ("api_versions", "print the API versions each broker supports "
                                            "(kafka-broker-api-versions.sh)"),
    "get-offsets": ("get_offsets", "print partition offsets by time (kafka-get-offsets.sh)"),
    "delete-records": ("delete_records", "delete partitions' records before given offsets "
                                         "(kafka-delete-records.sh)"),
    "console-producer": ("console_producer", "send lines from stdin to a topic (kafka-console-producer.sh)"),
    "console-consumer": ("console_consumer", "print the records of a topic (kafka-console-consumer.sh)"),
    "consumer-groups": ("consumer_groups", "list, describe, reset offsets of and delete consumer groups "
                                           "(kafka-consumer-groups.sh)"),
    "share-groups": ("share_groups", "list, describe and delete share groups (kafka-share-groups.sh)"),
    "configs": ("configs", "describe and alter topic and broker configs (kafka-configs.sh)"),
    "log-dirs": ("log_dirs", "describe the log directories of brokers (kafka-log-dirs.sh)"),
    "dump-log": ("dump_log", "print the batches and index entries of log segment files "
                             "(kafka-dump-log.sh)"),
    "features": ("features", "describe and update finalized feature levels (kafka-features.sh)"),
    "leader-election": ("leader_election", "elect preferred or unclean partition leaders (kafka-leader-election.sh)"),
    "reassign-partitions": ("reassign_partitions", "generate, execute and verify partition reassignments "
                                                   "(kafka-reassign-partitions.sh)"),
    "schema-registry": ("schema_registry", "list, get, register, check and delete schemas; set compatibility and "
                                           "modes (a schema registry's REST API)"),
}

#: Kafka's script names (kafka-topics.sh without .sh) -> the subcommand each runs, for scripts written for Kafka.
#: The schema registry tool is pybroker's own (as is the web console, which is not an admin tool): Kafka has no
#: script of either.
KAFKA_SCRIPTS: dict[str, str] = {f"kafka-{name}": name for name in TOOLS if name != "schema-registry"} | \
    {"kafka-server-start": "serve"}


def tool_main(name: str) -> Callable[[list[str]], int]:
    """The ``main`` of the admin tool ``name``, imported now (each tool loads only what it uses)."""
    module = importlib.import_module(f"{__name__}.{TOOLS[name][0]}")
    return guarded(module.main)


def guarded(entry: Callable[[list[str]], int]) -> Callable[[list[str]], int]:
    """``entry`` ending quietly when the reader of its output goes away, as a shell tool does."""

    def run(argv: list[str]) -> int:
        try:
            return entry(argv)
        except BrokenPipeError:
            # The reader went away (`| head`): stop quietly, as a shell tool does, and keep Python from
            # reporting the failed flush of stdout at exit.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_BROKEN_PIPE

    return run
