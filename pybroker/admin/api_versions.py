"""`pybroker broker-api-versions`: what each broker advertises, as kafka-broker-api-versions.sh prints it.

One block per broker: `host:port (id: N rack: R) -> (` then `\\tName(key): min to max [usable: v]`
lines joined by `,` and a closing `)`. "usable" is the version our own client would pick.
"""

from __future__ import annotations

import argparse
from typing import Mapping, Sequence

from pybroker.client.command_line import ClientSettings, ToolParser, add_connection_arguments, run_admin, run_tool
from pybroker.client import BrokerNode, VersionRange
from pybroker.client.versions import api_name, client_versions

ERROR_PREFIX = "Error while executing broker-api-versions command : "


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker broker-api-versions",
                        description="Print the API versions supported by every broker of the cluster.")
    add_connection_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool(build_parser(), argv, "pybroker-broker-api-versions", ERROR_PREFIX, command)


def command(_: argparse.Namespace, settings: ClientSettings) -> None:
    advertised = run_admin(settings, lambda admin: admin.api_versions())
    ours = client_versions()
    for broker, versions in advertised.items():
        print(f"{node_text(broker)} -> {versions_text(versions, ours)}")


def node_text(broker: BrokerNode) -> str:
    """Kafka's `Node.toString`: `host:port (id: N rack: R)`, with `null` for no rack."""
    return f"{broker.host}:{broker.port} (id: {broker.node_id} rack: {broker.rack or 'null'})"


def versions_text(broker: Mapping[int, VersionRange], ours: Mapping[int, VersionRange]) -> str:
    """Kafka's `NodeApiVersions.toString(true)`, APIs in key order."""
    lines = [api_line(key, broker[key], ours.get(key)) for key in sorted(broker)]
    return "(\n\t" + ",\n\t".join(lines) + "\n)"


def api_line(key: int, theirs: VersionRange, ours: VersionRange | None) -> str:
    versions = str(theirs.min) if theirs.min == theirs.max else f"{theirs.min} to {theirs.max}"
    line = f"{api_name(key)}({key}): {versions}"
    if ours is None:
        return line
    if ours.max < theirs.min:
        return line + " [unusable: node too new]"
    if theirs.max < ours.min:
        return line + " [unusable: node too old]"
    return line + f" [usable: {min(ours.max, theirs.max)}]"
