"""Every exception class pybroker defines maps to its own Kafka error code, unless listed here with a reason.

An unmapped exception reaching a handler answers UNKNOWN_SERVER_ERROR and logs a traceback, the
symptom of the Fetch out-of-range bug; walking the package catches the next one when it is written.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
from pathlib import Path

import pytest

import pybroker
from pybroker.client.errors import ResponseError
from pybroker.protocol.error_codes import ErrorCode
from pybroker.server import error_mapping
from pybroker.server.error_mapping import error_code_for

PACKAGE = Path(pybroker.__file__).parent

# Raised where no handler's answer is built: they never reach error_code_for.
NOT_FROM_HANDLERS = {
    "pybroker.client.command_line.UsageError": "command-line tools only",
    "pybroker.client.command_line.CommandError": "command-line tools only",
    "pybroker.console.app.Refused": "the web console's own pages (bad form input, shown like a broker's refusal)",
    "pybroker.console.messages.BrowseError": "the web console's message browser (a bad seek)",
    "pybroker.server.request_channel.CloseConnection": "the network layer closes the connection, as Kafka does",
    "pybroker.protocol.errors.FrameTooLarge": "the network layer closes the connection before decoding",
    "pybroker.protocol.errors.EncodeError": "our own response cannot be encoded: the dispatcher closes the connection",
    "pybroker.server.zk_mode.ZooKeeperStartError": "broker start-up only",
    "pybroker.server.share_service.ShareStateUnavailable": "ShareFetch and ShareAcknowledge catch it and answer the "
                                                           "share coordinator's code it carries, per partition",
    "pybroker.common.native.BuildError": "`import pybroker` only: a compiled build that cannot run here",
    "pybroker.security.principal.NoMatchingRule": "TLS connection set-up: the socket server closes the connection",
    "pybroker.security.sasl.SaslError": "base of the SASL mechanisms' failures, caught by the SASL session",
    "pybroker.security.sasl.SaslAuthenticationError": "SaslAuthenticate answers SASL_AUTHENTICATION_FAILED itself",
    "pybroker.security.sasl.SaslCredentialError": "turned into SaslAuthenticationError by the SASL session",
    "pybroker.security.sasl.jaas.JaasConfigError": "start-up config checks and client properties only",
    "pybroker.security.sasl.oauthbearer.InvalidToken": "OAUTHBEARER answers it with its error challenge",
    "pybroker.client.sasl.SaslConfigError": "client properties (--command-config) only",
    "pybroker.controller.zk_writer.StateConflict": "the controller's own ISR-race signal, caught by its partition state machine",
    "pybroker.records.record_scan._GiveUp": "caught inside record_scan: the pure-Python walk then runs and names the fault",
    "pybroker.records.validation.OverBudget": "caught by append_records, which checks the batch on an I/O thread instead",
    "pybroker.protocol.hot_codecs.Unusual": "caught inside the typed codecs: the generic codec reads or writes the "
                                            "message instead",
    "pybroker.common.client_metrics.InvalidSubscription": "caught by the client-metrics config handler and the "
                                                          "telemetry manager, which answer INVALID_CONFIG/INVALID_REQUEST",
    "pybroker.server.telemetry.series.InvalidPayload": "caught by PushTelemetry, which answers INVALID_RECORD",
    "pybroker.coordinator.consumer.HeartbeatError": "caught by the consumer protocol, which answers its code",
    "pybroker.coordinator.share.configs.GroupConfigError": "caught by the GROUP config handler, which answers "
                                                            "INVALID_CONFIG",
    "pybroker.log.file_slice.PageCacheMiss": "caught inside LogSegment.read, which raises ColdReadError",
    "pybroker.log.errors.ColdReadError": "caught by the Fetch handler, which warms the range off the loop and reads again",
    "pybroker.testing.embedded.EmbeddedBrokerError": "the test-embedding API, in the test run's process, not the broker",
    "pybroker.testing.zookeeper.ZooKeeperUnavailable": "the test-embedding API, in the test run's process, not the broker",
    "pybroker.client.registry_http.RegistryRequestError": "the schema registry CLI and the console, not the broker",
    "pybroker.schema_registry.errors.RegistryError": "the schema registry's HTTP API answers it with its own codes",
    "pybroker.schema_registry.http._Reject": "the schema registry's HTTP server answers a 4xx and closes",
    "pybroker.schema_registry.registry._LostRace": "caught by the registry's write, which tries again",
    "pybroker.schema_registry.service.ConfigError": "broker start-up only",
    "pybroker.schema_registry.types.InvalidSchemaError": "the schema registry answers 42201",
    "pybroker.spark_jobs.kafka_source.reader.DataLossError": "the Spark jobs' Kafka source, in Spark, not the broker",
}
# Base classes: only their subclasses are raised (checked below), and each subclass has a row.
BASES = {
    "pybroker.client.errors.KafkaClientError",
    "pybroker.common.metadata_errors.MetadataError",
    "pybroker.log.errors.ProducerStateError",
    "pybroker.protocol.errors.ProtocolError",
    "pybroker.records.errors.RecordsError",
    "pybroker.replication.errors.ReplicationError",
}
# Kafka answers these with UNKNOWN_SERVER_ERROR too.
DELIBERATELY_UNKNOWN = {
    "pybroker.log.errors.InvalidReadSizeError": "Kafka's LogSegment.read throws IllegalArgumentException",
}


def _module_names() -> list[str]:
    """Every module under pybroker/, by path (pybroker.controller has no __init__.py, so pkgutil skips it)."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _exception_classes() -> dict[str, type[BaseException]]:
    found = {}
    for name in _module_names():
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == name:
                found[f"{name}.{obj.__qualname__}"] = obj
    return found


CLASSES = _exception_classes()


def _instance(cls: type[BaseException]) -> BaseException:
    """An instance without running __init__ (some need offsets or codes); mapping looks only at the type."""
    if issubclass(cls, ResponseError):
        return cls(ErrorCode.NOT_COORDINATOR)
    return cls.__new__(cls)


def test_the_walk_finds_the_exceptions_of_every_layer():
    modules = {name.rsplit(".", 1)[0] for name in CLASSES}
    assert {"pybroker.log.errors", "pybroker.controller.errors", "pybroker.controller.zk_writer",
            "pybroker.coordinator.runtime", "pybroker.client.errors", "pybroker.replication.errors",
            "pybroker.records.errors"} <= modules


def test_the_exemption_lists_name_classes_that_exist():
    assert set(NOT_FROM_HANDLERS) | BASES | set(DELIBERATELY_UNKNOWN) <= set(CLASSES)


@pytest.mark.parametrize("name", sorted(set(CLASSES) - set(NOT_FROM_HANDLERS) - BASES))
def test_exception_maps_to_a_specific_kafka_error_code(name, caplog):
    with caplog.at_level(logging.ERROR, logger="pybroker.server"):
        code = error_code_for(_instance(CLASSES[name]))
    if name in DELIBERATELY_UNKNOWN:
        assert code is ErrorCode.UNKNOWN_SERVER_ERROR
    else:
        assert code is not ErrorCode.UNKNOWN_SERVER_ERROR, f"{name} has no row in server/error_mapping.py"
    assert caplog.records == [], "an expected error must not log"


@pytest.mark.parametrize("name", sorted(BASES))
def test_base_classes_are_never_raised_themselves(name):
    base = name.rsplit(".", 1)[1]
    raising = re.compile(rf"raise {base}\(")
    offenders = [str(path) for path in PACKAGE.rglob("*.py") if raising.search(path.read_text())]
    assert offenders == [], f"{base} is raised directly: give it a row in error_mapping.CODES"


def test_rows_are_reachable_subclasses_before_their_bases():
    for i, (earlier, _) in enumerate(error_mapping.CODES):
        for later, _ in error_mapping.CODES[i + 1:]:
            assert not issubclass(later, earlier), f"{later.__name__} is shadowed by {earlier.__name__}"


def test_another_brokers_answer_keeps_its_code():
    assert error_code_for(ResponseError(ErrorCode.NOT_ENOUGH_REPLICAS)) is ErrorCode.NOT_ENOUGH_REPLICAS


def test_an_unexpected_error_logs_its_traceback_once_per_interval_per_type(caplog, monkeypatch):
    now = [0.0]
    monkeypatch.setattr(error_mapping, "_unexpected", error_mapping._ThrottledLog(60.0, lambda: now[0]))
    with caplog.at_level(logging.ERROR, logger="pybroker.server"):
        codes = {error_code_for(AttributeError(f"attempt {i}")) for i in range(100)}
        error_code_for(KeyError("another type"))
        now[0] = 61.0
        error_code_for(AttributeError("a minute later"))
    assert codes == {ErrorCode.UNKNOWN_SERVER_ERROR}
    assert [(r.exc_info[0], str(r.exc_info[1]), r.getMessage()) for r in caplog.records] == [
        (AttributeError, "attempt 0", "Unexpected error while handling a request"),
        (KeyError, "'another type'", "Unexpected error while handling a request"),
        (AttributeError, "a minute later",
         "Unexpected error while handling a request (99 more AttributeError since the last report)")]
