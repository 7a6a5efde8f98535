"""The `pybroker` command: one entry point with subcommands."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from pybroker.admin import TOOLS, tool_main
from pybroker.common.config import BrokerConfig, ConfigError

LOG_FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    if args_list and args_list[0] in TOOLS:  # each tool parses its own flags
        return tool_main(args_list[0])(args_list[1:])
    parser = argparse.ArgumentParser(prog="pybroker", description="A Kafka-compatible broker written in Python.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run a broker", description="Run a broker.")
    serve.add_argument("config", help="server.properties file")
    serve.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="override a property of the config file (repeatable)")
    for name, (_, summary) in TOOLS.items():
        commands.add_parser(name, help=summary, add_help=False)
    args = parser.parse_args(argv)
    if args.command == "serve":
        return serve_command(args.config, args.override)
    parser.error(f"unknown command {args.command}")
    return 2


def serve_command(config_path: str, overrides: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)
    try:
        config = BrokerConfig.load(config_path, overrides)
    except ConfigError as exc:
        print(f"pybroker: {exc}", file=sys.stderr)
        return 1
    for key in config.unknown:
        logging.getLogger("pybroker.config").warning("The configuration '%s' was supplied but isn't a known config.",
                                                     key)
    try:
        import uvloop
    except ImportError:
        uvloop = None
    runner = uvloop.run if uvloop is not None else asyncio.run
    try:
        return runner(_serve(config))
    except NotImplementedError as exc:
        print(f"pybroker: {exc}", file=sys.stderr)
        return 1


async def _serve(config: BrokerConfig) -> int:
    from pybroker.server.broker import Broker

    broker = Broker(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except OSError as exc:
        print(f"pybroker: cannot start: {exc}", file=sys.stderr)
        return 1
    await stop.wait()
    await broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
