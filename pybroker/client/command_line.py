"""What every command-line program on the client shares (the admin tools and the web console's launcher):
argument parsing with Kafka's exit codes, connection options and settings, errors, running a client."""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
from dataclasses import dataclass
from typing import Awaitable, Callable, NoReturn, Sequence, TypeVar

from pybroker.client import AdminClient, KafkaClient, KafkaClientError
from pybroker.client.sasl import SaslConfigError, SaslCredentials
from pybroker.common.config import ConfigError, parse_properties
from pybroker.common.listeners import SECURITY_PROTOCOLS, TLS_PROTOCOLS
from pybroker.security.tls import TlsSettings, client_context

T = TypeVar("T")

DEFAULT_TIMEOUT_MS = 30000
EXIT_OK = 0
EXIT_FAILURE = 1  # Kafka's tools exit 1 on bad arguments and on failed commands alike


class UsageError(Exception):
    """Bad or conflicting command-line arguments, reported as one line and exit code 1."""


class CommandError(Exception):
    """A failed command, printed after the tool's error prefix (Kafka's tools exit 1 for these)."""


class ToolParser(argparse.ArgumentParser):
    """argparse with a one-line error and Kafka's exit code 1 (argparse would use 2)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see --help)", file=sys.stderr)
        sys.exit(EXIT_FAILURE)


@dataclass(frozen=True, slots=True)
class ClientSettings:
    bootstrap: str
    timeout_s: float
    client_id: str
    zookeeper: str | None = None  # HOST:PORT[/chroot]: `topics` works on the znodes instead of a broker
    sasl: SaslCredentials | None = None
    tls: ssl.SSLContext | None = None  # security.protocol SSL or SASL_SSL


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT...]",
                        help="the broker(s) to connect to (required)")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties file: client.id, default.api.timeout.ms, request.timeout.ms, "
                             "security.protocol, sasl.mechanism, sasl.jaas.config, and for SSL and SASL_SSL "
                             "ssl.truststore.location, ssl.keystore.location (ssl.*.type=PEM), "
                             "ssl.endpoint.identification.algorithm")
    parser.add_argument("--command-timeout", type=int, metavar="MS",
                        help=f"bound on reaching the cluster and on each request (default {DEFAULT_TIMEOUT_MS}, "
                             "or default.api.timeout.ms from --command-config)")


def run_tool(parser: ToolParser, argv: Sequence[str] | None, default_client_id: str, error_prefix: str,
             command: Callable[[argparse.Namespace, ClientSettings], int | None], *,
             command_error_prefix: str | None = None) -> int:
    """A tool's main: parse, build the connection settings, run ``command``; its exit code (0 for None).

    Usage errors end as one line and exit 1 through the parser; failed commands print the tool's error
    prefix and the message (``command_error_prefix`` for CommandError if the tool words those apart)."""
    args = parser.parse_args(argv)
    try:
        return command(args, client_settings(args, default_client_id)) or EXIT_OK
    except UsageError as exc:
        parser.error(str(exc))
    except KafkaClientError as exc:
        return report(error_prefix, exc)
    except CommandError as exc:
        return report(error_prefix if command_error_prefix is None else command_error_prefix, exc)


def client_settings(args: argparse.Namespace, default_client_id: str) -> ClientSettings:
    """Connection settings from the flags and the optional --command-config file; UsageError if unusable."""
    zookeeper = getattr(args, "zookeeper", None)
    if zookeeper is not None and args.bootstrap_server:
        raise UsageError("Only one of --bootstrap-server or --zookeeper must be specified")
    if zookeeper is None and not args.bootstrap_server:
        raise UsageError("--bootstrap-server must be specified")
    properties: dict[str, str] = {}
    if args.command_config:
        try:
            with open(args.command_config, encoding="utf-8") as handle:
                properties = parse_properties(handle.read())
        except OSError as exc:
            raise UsageError(f"Cannot read {args.command_config}: {exc.strerror}") from None
    protocol = properties.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise UsageError(f"{args.command_config}: security.protocol={protocol} is not supported")
    try:
        tls = client_context(TlsSettings.from_properties(properties)) if protocol in TLS_PROTOCOLS else None
    except ConfigError as exc:
        raise UsageError(f"{args.command_config}: {exc}") from None
    try:
        sasl = SaslCredentials.from_properties(properties)
    except SaslConfigError as exc:
        raise UsageError(f"{args.command_config}: {exc}") from None
    timeout_ms = args.command_timeout
    if timeout_ms is None:
        configured = properties.get("default.api.timeout.ms") or properties.get("request.timeout.ms")
        try:
            timeout_ms = int(configured) if configured else DEFAULT_TIMEOUT_MS
        except ValueError:
            raise UsageError(f"{args.command_config}: invalid timeout {configured!r}") from None
    if timeout_ms <= 0:
        raise UsageError(f"the timeout must be positive, got {timeout_ms} ms")
    return ClientSettings(args.bootstrap_server or "", timeout_ms / 1000,
                          properties.get("client.id", default_client_id), zookeeper, sasl, tls)


def run_admin(settings: ClientSettings, operation: Callable[[AdminClient], Awaitable[T]]) -> T:
    """Run ``operation`` with a connected admin client; client failures propagate as KafkaClientError."""
    return run_client(settings, lambda client: operation(AdminClient(client)))


def run_client(settings: ClientSettings, operation: Callable[[KafkaClient], Awaitable[T]]) -> T:
    """Run ``operation`` with a client for the cluster, closed afterwards; UsageError for a bad bootstrap list."""

    async def go() -> T:
        try:
            client = KafkaClient(settings.bootstrap, client_id=settings.client_id, timeout=settings.timeout_s,
                                 sasl=settings.sasl, tls=settings.tls)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        async with client:
            return await operation(client)

    return asyncio.run(go())


def report(prefix: str, error: Exception) -> int:
    """Print Kafka's one-line failure message to stderr; return the exit code."""
    print(f"{prefix}{error}", file=sys.stderr)
    return EXIT_FAILURE

