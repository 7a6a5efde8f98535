"""`pybroker console --bootstrap-server HOST:PORT [--command-config FILE] [--port 8080] [--allow-writes]`.

The console's own settings sit beside the client's in the --command-config file: `console.password`
makes it ask for a login.
"""

from __future__ import annotations

import argparse
import socket
from typing import Sequence

from pybroker.client.command_line import (
    ClientSettings,
    CommandError,
    ToolParser,
    UsageError,
    add_connection_arguments,
    run_tool,
)
from pybroker.common.config import parse_properties

ERROR_PREFIX = "Error: "
DEFAULT_PORT = 8080
CONSOLE_TIMEOUT_MS = 5000  # a page waits this long for an unreachable cluster before showing the banner
GRACE_S = 5  # on SIGTERM, how long open requests may run on before the console exits anyway
BACKLOG = 128


def build_parser() -> ToolParser:
    parser = ToolParser(prog="pybroker console", description="Serve a web console for the cluster.")
    add_connection_arguments(parser)
    parser.set_defaults(command_timeout=CONSOLE_TIMEOUT_MS)
    parser.add_argument("--host", default="127.0.0.1", help="the address to serve on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the port to serve on (default {DEFAULT_PORT})")
    parser.add_argument("--allow-writes", action="store_true",
                        help="allow changes (create/delete topics, produce, reset offsets, ACLs...); read-only without")
    parser.add_argument("--sample-interval", type=float, default=10.0, metavar="SECONDS",
                        help="how often the charts' offsets are sampled (default 10)")
    parser.add_argument("--schema-registry-url", metavar="URL",
                        help="the schema registry to list subjects from, e.g. http://127.0.0.1:8081")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool(build_parser(), argv, "pybroker-console", ERROR_PREFIX, command)


def command(args: argparse.Namespace, settings: ClientSettings) -> None:
    try:
        import uvicorn

        from pybroker.console.app import ConsoleConfig, create_app
    except ImportError as exc:
        raise UsageError(f"the console needs its extra dependencies (pip install 'pybroker[console]'): {exc}") from None
    if args.sample_interval <= 0:
        raise UsageError("--sample-interval must be positive")
    password = None
    if args.command_config:
        with open(args.command_config, encoding="utf-8") as handle:
            password = parse_properties(handle.read()).get("console.password") or None
    listener = bind(args.host, args.port)  # before anything starts: a taken port is one line and exit 1
    app = create_app(ConsoleConfig(settings, args.allow_writes, password, args.sample_interval,
                                   args.schema_registry_url))
    print(f"pybroker console for {settings.bootstrap} on http://{args.host}:{args.port}/", flush=True)
    # uvicorn stops on SIGTERM and SIGINT; open connections get GRACE_S to finish, then are closed.
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=GRACE_S))
    server.run(sockets=[listener])


def bind(host: str, port: int) -> socket.socket:
    """The console's listening socket; CommandError naming the address when it cannot be had."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        listener = socket.socket(family, kind, proto)
    except OSError as exc:
        raise CommandError(f"cannot serve the console on {host}:{port}: {exc.strerror or exc}") from None
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(BACKLOG)
    except OSError as exc:
        listener.close()
        raise CommandError(f"cannot serve the console on {host}:{port}: {exc.strerror or exc}") from None
    return listener
