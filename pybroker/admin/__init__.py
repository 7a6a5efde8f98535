"""Command-line tools in the style of Kafka's `bin/kafka-*.sh`, as `pybroker` subcommands.

They reach brokers only through :mod:`pybroker.client` (over the wire), never broker internals.
Each tool module has `main(argv) -> exit code`.
"""

from __future__ import annotations

import importlib
from typing import Callable

#: subcommand -> (module under pybroker.admin, one-line help); modules are imported on use only.
TOOLS: dict[str, tuple[str, str]] = {
    "topics": ("topics", "create, list, describe, alter and delete topics (kafka-topics.sh)"),
    "broker-api-versions": ("api_versions", "print the API versions each broker supports "
                                            "(kafka-broker-api-versions.sh)"),
    "get-offsets": ("get_offsets", "print partition offsets by time (kafka-get-offsets.sh)"),
}


def tool_main(name: str) -> Callable[[list[str]], int]:
    module = importlib.import_module(f"{__name__}.{TOOLS[name][0]}")
    entry: Callable[[list[str]], int] = module.main
    return entry
