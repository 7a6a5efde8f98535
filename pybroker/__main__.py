"""The `pybroker` command: one entry point with subcommands."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from pybroker.admin import TOOLS, tool_main
from pybroker.common.config import BrokerConfig, ConfigError

# Kafka's log4j layout `[%d] %p %m (%c)%n`, with its level names (WARN, not Python's WARNING), so a broker
# log reads and greps like a Kafka one: one line per event.
LOG_FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"
KAFKA_LEVEL_NAMES = {logging.WARNING: "WARN", logging.CRITICAL: "FATAL"}
log = logging.getLogger("pybroker.server")


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
    from pybroker.server.sasl_session import SaslAuthenticator

    try:
        config = BrokerConfig.load(config_path, overrides)
        SaslAuthenticator(config, lambda: None)  # refuses SASL settings that cannot work
    except ConfigError as exc:  # bad input: the CLI's one line, before the broker logs anything
        print(f"pybroker: {exc}", file=sys.stderr)
        return 1
    configure_logging()
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
        log.error("Exiting: %s", exc)
        return 1


def configure_logging() -> None:
    """The broker's log on stderr at INFO, in Kafka's layout and level names."""
    for level, name in KAFKA_LEVEL_NAMES.items():
        logging.addLevelName(level, name)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)


async def _serve(config: BrokerConfig) -> int:
    from pybroker.server.broker import Broker

    try:
        broker = Broker(config)
    except ConfigError as exc:  # e.g. TLS material that cannot be loaded: one line naming the key
        log.error("Exiting: %s", exc)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except OSError as exc:  # a taken port, an unreachable ZooKeeper: one log line, not a traceback
        log.error("[KafkaServer id=%d] Fatal error during startup, exiting: %s", broker.broker_id, exc)
        return 1
    await stop.wait()
    await broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
