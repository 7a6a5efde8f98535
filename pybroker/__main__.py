"""The `pybroker` command: one entry point with subcommands; the `kafka-*` scripts are aliases of them."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any, Callable, Coroutine

from pybroker.admin import KAFKA_SCRIPTS, TOOLS, guarded, tool_main
from pybroker.common import native
from pybroker.common.config import BrokerConfig, ConfigError, parse_properties

# Kafka's log4j layout `[%d] %p %m (%c)%n`, with its level names (WARN, not Python's WARNING), so a broker
# log reads and greps like a Kafka one: one line per event.
LOG_FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"
KAFKA_LEVEL_NAMES = {logging.WARNING: "WARN", logging.CRITICAL: "FATAL"}
#: The sample a broker started without a config file runs with, its log.dirs in the user's data directory.
DEVELOPMENT_SAMPLE = "server"
#: The web console's subcommand: a program of its own on the client, like the admin tools, but not one of them.
CONSOLE = "console"
CONSOLE_HELP = "serve a web console for the cluster (needs pybroker[console])"
log = logging.getLogger("pybroker.server")


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    if args_list and args_list[0] in TOOLS:  # each tool parses its own flags
        return tool_main(args_list[0])(args_list[1:])
    if args_list and args_list[0] == CONSOLE:
        from pybroker.console.cli import main as console_main

        return guarded(console_main)(args_list[1:])
    parser = argparse.ArgumentParser(prog="pybroker", description="A Kafka-compatible broker written in Python.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve", help="run a broker", description="Run a broker. Without a config file: a development single node "
        f"on 127.0.0.1:9092 (the '{DEVELOPMENT_SAMPLE}' sample) with its data in the user's data directory.")
    serve.add_argument("config", nargs="?", help="server.properties file (optional)")
    serve.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="override a property of the config file (repeatable)")
    sample = commands.add_parser("sample-config", help="print a sample configuration shipped with pybroker",
                                 description="Print a sample configuration; without a name, list them.")
    sample.add_argument("name", nargs="?", help="the sample's name, e.g. server, ssl, sasl-ssl, server-0")
    for name, (_, summary) in TOOLS.items():
        commands.add_parser(name, help=summary, add_help=False)
    commands.add_parser(CONSOLE, help=CONSOLE_HELP, add_help=False)
    args = parser.parse_args(argv)
    if args.command == "serve":
        return serve_command(args.config, args.override)
    if args.command == "sample-config":
        return sample_config_command(args.name)
    parser.error(f"unknown command {args.command}")
    return 2


def kafka_script() -> int:
    """Entry point of the `kafka-topics`, `kafka-console-producer`, ... scripts: the subcommand they name."""
    script = Path(sys.argv[0]).name.removesuffix(".sh")
    if script not in KAFKA_SCRIPTS:
        print(f"pybroker: {script} is not one of the kafka-* scripts ({', '.join(sorted(KAFKA_SCRIPTS))})",
              file=sys.stderr)
        return 1
    return main([KAFKA_SCRIPTS[script], *sys.argv[1:]])


def sample_config_command(name: str | None) -> int:
    from pybroker.samples import sample_names, sample_text

    if name is None:
        for sample in sample_names():
            first = sample_text(sample).splitlines()[0].lstrip("# ")
            print(f"{sample:<18} {first}")
        return 0
    try:
        sys.stdout.write(sample_text(name))
    except KeyError as exc:
        print(f"pybroker: {exc.args[0]}", file=sys.stderr)
        return 1
    return 0


def development_config(overrides: list[str]) -> tuple[BrokerConfig, Path]:
    """The sample server.properties (127.0.0.1:9092, one node) with log.dirs in the user's data directory."""
    from pybroker.common.user_dirs import user_data_dir
    from pybroker.samples import sample_text

    data = user_data_dir() / "kafka-logs"
    values = parse_properties(sample_text(DEVELOPMENT_SAMPLE))
    values["log.dirs"] = str(data)
    config = BrokerConfig.load(None, overrides, values)
    return config, Path(config.log_dirs[0])


def serve_command(config_path: str | None, overrides: list[str]) -> int:
    from pybroker.common import allocator
    from pybroker.server.config_check import check_config

    data_dir = None
    try:
        if config_path is None:
            config, data_dir = development_config(overrides)
        else:
            config = BrokerConfig.load(config_path, overrides)
        check_config(config)
    except ConfigError as exc:  # bad input: the CLI's one line, before the broker logs anything
        print(f"pybroker: {exc}", file=sys.stderr)
        return 1
    configure_logging()
    if data_dir is not None:
        log.info("No config file given: a development single node (`pybroker sample-config %s`), data in %s",
                 DEVELOPMENT_SAMPLE, data_dir)
    for key in config.unknown:
        logging.getLogger("pybroker.config").warning("The configuration '%s' was supplied but isn't a known config.",
                                                     key)
    runner = event_loop_runner()
    log.info("Build: %s", native.describe())
    log.info("Allocator: %s", allocator.tune())
    try:
        return runner(_serve(config))
    except NotImplementedError as exc:
        log.error("Exiting: %s", exc)
        return 1


def event_loop_runner() -> Callable[[Coroutine[Any, Any, int]], int]:
    """uvloop's run where uvloop is installed (Linux, macOS), else asyncio's; the log says which."""
    try:
        import uvloop
    except ImportError:
        log.info("Event loop: asyncio's default (uvloop is not installed on this platform)")
        return asyncio.run
    log.info("Event loop: uvloop %s", uvloop.__version__)
    return uvloop.run


def configure_logging() -> None:
    """The broker's log on stderr at INFO, in Kafka's layout and level names."""
    for level, name in KAFKA_LEVEL_NAMES.items():
        logging.addLevelName(level, name)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)


async def _serve(config: BrokerConfig) -> int:
    from pybroker.server.broker import Broker

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        broker = Broker(config)
    except ConfigError as exc:  # e.g. TLS material that cannot be loaded: one line naming the key
        log.error("Exiting: %s", exc)
        return 1
    except OSError as exc:  # an unwritable log dir
        log.error("Exiting: %s", exc)
        return 1
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
