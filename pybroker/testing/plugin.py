"""The pytest plugin (entry point ``pytest11``): fixtures ``kafka_broker``, ``kafka_topic``, ``kafka_cluster``,
``schema_registry_url``.

Loading it costs an import of this module only: no broker starts, nothing of pybroker is imported, until
a test asks for one of the fixtures. ``--kafka-bootstrap host:port`` runs the same tests against an
external Kafka; ``--kafka-broker-config key=value`` (repeatable) configures the embedded broker. A failed
test that used a broker gets a report section with that broker's log lines from during the test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterator, Mapping

import pytest

if TYPE_CHECKING:
    from pybroker.testing.cluster import EmbeddedCluster

LOG_LINES_REPORTED = 60
_LOG_SOURCES = pytest.StashKey[dict[str, Callable[[], list[str]]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kafka", "Kafka broker fixtures (pybroker)")
    group.addoption("--kafka-bootstrap", metavar="HOST:PORT[,...]", default=None,
                    help="run kafka_broker/kafka_topic tests against this Kafka instead of an embedded pybroker")
    group.addoption("--kafka-broker-config", metavar="KEY=VALUE", action="append", default=[],
                    help="a config of the embedded broker and cluster, e.g. num.partitions=3 (repeatable)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kafka_topic(partitions=1, config=None): how the kafka_topic fixture "
                                       "creates the test's topic")


def _broker_config(config: pytest.Config) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in config.getoption("kafka_broker_config"):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise pytest.UsageError(f"--kafka-broker-config expects KEY=VALUE, got {item!r}")
        pairs[key.strip()] = value.strip()
    return pairs


@dataclass
class ExternalKafka:
    """A Kafka that is already running (``--kafka-bootstrap``): the same surface as EmbeddedBroker's for
    what the fixtures need, and no log of its own."""

    bootstrap_servers: str
    replication_factor: int = -1  # the cluster's default.replication.factor (CreateTopics v4+)
    lines: list[str] = field(default_factory=list)

    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None) -> str:
        from pybroker.testing.embedded import create_topic_async, run_sync

        return run_sync(lambda: create_topic_async(self.bootstrap_servers, name, partitions,
                                                   self.replication_factor, config))


def _log_source(child_getter: Callable[[], Any]) -> Callable[[], list[str]]:
    """The broker's log lines from now on (its last lines when it logged nothing since)."""
    child = child_getter()
    seen = child.lines_seen if child is not None else 0

    def lines() -> list[str]:
        current = child_getter()
        if current is None:
            return []
        since = current.since(seen) if current is child else list(current.lines)  # restarted: a new log
        return since or list(current.lines)[-LOG_LINES_REPORTED:]

    return lines


@pytest.fixture(scope="session")
def kafka_broker(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One broker for the session (an EmbeddedBroker, or the external Kafka of ``--kafka-bootstrap``)."""
    bootstrap = request.config.getoption("kafka_bootstrap")
    if bootstrap:
        yield ExternalKafka(bootstrap)
        return
    from pybroker.testing.embedded import EmbeddedBroker

    with EmbeddedBroker(_broker_config(request.config), schema_registry=True) as broker:
        yield broker


@pytest.fixture(scope="session")
def schema_registry_url(kafka_broker: Any) -> str:
    """The URL of the session broker's schema registry (Confluent's REST API), for SchemaRegistryClient."""
    url = getattr(kafka_broker, "schema_registry_url", None)
    if url is None:
        pytest.skip("--kafka-bootstrap names no schema registry")
    return url


@pytest.fixture(scope="session")
def kafka_cluster(request: pytest.FixtureRequest) -> Iterator[EmbeddedCluster]:
    """Three pybrokers and a real ZooKeeper for the session (skipped under ``--kafka-bootstrap``)."""
    if request.config.getoption("kafka_bootstrap"):
        pytest.skip("kafka_cluster kills and restarts brokers: it needs the embedded cluster, "
                    "not --kafka-bootstrap")
    from pybroker.testing.cluster import EmbeddedCluster

    with EmbeddedCluster(3, _broker_config(request.config)) as cluster:
        yield cluster


@pytest.fixture
def kafka_topic(request: pytest.FixtureRequest, kafka_broker: Any) -> str:
    """A fresh topic named after the test (``@pytest.mark.kafka_topic(partitions=3)`` sets its shape)."""
    from pybroker.testing.embedded import unique_topic_name

    marker = request.node.get_closest_marker("kafka_topic")
    options = dict(marker.kwargs) if marker is not None else {}
    name = unique_topic_name(request.node.name)
    return kafka_broker.create_topic(name, options.get("partitions", 1), options.get("config"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    yield
    # After the fixtures are set up: the broker(s) this test uses exist now, and their log so far is not its.
    funcargs: dict[str, Any] = getattr(item, "funcargs", {})
    sources: dict[str, Callable[[], list[str]]] = {}
    broker = funcargs.get("kafka_broker")
    if broker is not None and hasattr(broker, "node"):
        sources["kafka broker log"] = _log_source(_child_of(broker.node))
    cluster = funcargs.get("kafka_cluster")
    if cluster is not None:
        for broker_id, node in cluster.brokers.items():
            sources[f"kafka broker {broker_id} log"] = _log_source(_child_of(node))
    item.stash[_LOG_SOURCES] = sources


def _child_of(node: Any) -> Callable[[], Any]:
    return lambda: node.child


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and report.when == "call":
        for title, lines_since in item.stash.get(_LOG_SOURCES, {}).items():
            lines = lines_since()[-LOG_LINES_REPORTED:]
            report.sections.append((title, "\n".join(lines) if lines else "(the broker logged nothing)"))
    return report
