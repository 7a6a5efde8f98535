"""`pybroker leader-election`: kafka-leader-election.sh's flags, JSON file and output lines.

Preferred election hands leadership back to each partition's first replica; unclean election picks
a leader for partitions that have none, from outside the ISR if need be. Failures per partition are
listed and the tool exits 1, as LeaderElectionCommand does.
"""

from __future__ import annotations

import argparse
import json
from typing import Sequence

from pybroker.admin.retry import call_with_retries
from pybroker.client.command_line import (
    ClientSettings,
    CommandError,
    ToolParser,
    UsageError,
    add_connection_arguments,
    run_admin,
    run_tool,
)
from pybroker.client import ResponseError
from pybroker.common.topic import TopicPartition
from pybroker.common.election_type import ElectionType
from pybroker.protocol.error_codes import ErrorCode

ERROR_PREFIX = "Error while making request: "


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker leader-election",
                        description="Elect partition leaders: the preferred replica or, unclean, any live one.")
    add_connection_arguments(parser)
    parser.add_argument("--admin.config", dest="command_config", metavar="FILE",
                        help="same as --command-config (kafka-leader-election.sh's name)")
    parser.add_argument("--election-type", metavar="PREFERRED|UNCLEAN", help="type of election (required)")
    parser.add_argument("--all-topic-partitions", action="store_true", help="elect leaders of every partition")
    parser.add_argument("--topic", metavar="TOPIC", help="the topic of the partition to elect (with --partition)")
    parser.add_argument("--partition", type=int, metavar="P", help="the partition to elect (with --topic)")
    parser.add_argument("--path-to-json-file", metavar="FILE",
                        help='partitions to elect: {"partitions":[{"topic":"t","partition":0}]}')
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool(build_parser(), argv, "leader-election", ERROR_PREFIX, _run)


def _run(args: argparse.Namespace, settings: ClientSettings) -> int:
    if not args.election_type or args.election_type.upper() not in ElectionType.__members__:
        raise UsageError("--election-type must be PREFERRED or UNCLEAN")
    election_type = ElectionType[args.election_type.upper()]
    partitions = _partitions(args)
    results = run_admin(settings, lambda admin: call_with_retries(
        admin.client, "electLeaders", lambda: admin.elect_leaders(election_type, partitions)))
    name = election_type.name
    elected = [tp for tp, error in results.items() if error is None]
    not_needed = [tp for tp, error in results.items()
                  if error is not None and error.code == ErrorCode.ELECTION_NOT_NEEDED]
    failed = {tp: error for tp, error in results.items()
              if error is not None and error.code != ErrorCode.ELECTION_NOT_NEEDED}
    if not results:  # only --all-topic-partitions answers with no partition: none needed an election
        print(f"No partition needed a leader election ({name}): every partition already has "
              f"{'its preferred leader' if election_type is ElectionType.PREFERRED else 'a leader'}.")
    if elected:
        print(f"Successfully completed leader election ({name}) for partitions {_names(elected)}")
    if not_needed:
        print(f"Valid replica already elected for partitions {_names(not_needed)}")
    for tp, error in sorted(failed.items()):
        print(f"Error completing leader election ({name}) for partition: {tp}: {_exception_name(error)}: {error}")
    if failed:
        raise CommandError(f"{len(failed)} replica(s) could not be elected")
    return 0


def _partitions(args: argparse.Namespace) -> list[TopicPartition] | None:
    sources = [args.all_topic_partitions, args.topic is not None or args.partition is not None,
               args.path_to_json_file is not None]
    if sum(sources) != 1:
        raise UsageError("exactly one of --all-topic-partitions, --topic with --partition, "
                         "or --path-to-json-file must be given")
    if args.all_topic_partitions:
        return None
    if args.path_to_json_file is None:
        if args.topic is None or args.partition is None:
            raise UsageError("--topic and --partition must be given together")
        return [TopicPartition(args.topic, args.partition)]
    try:
        with open(args.path_to_json_file, encoding="utf-8") as handle:
            document = json.load(handle)
        return [TopicPartition(str(entry["topic"]), int(entry["partition"])) for entry in document["partitions"]]
    except OSError as exc:
        raise UsageError(f"Cannot read {args.path_to_json_file}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{args.path_to_json_file} is not a partitions JSON file: {exc}") from None


def _names(partitions: list[TopicPartition]) -> str:
    return ", ".join(str(tp) for tp in sorted(partitions))


def _exception_name(error: ResponseError) -> str:
    """Kafka's exception class for the error, e.g. PreferredLeaderNotAvailableException."""
    return "".join(word.capitalize() for word in error.code.name.split("_")) + "Exception"
