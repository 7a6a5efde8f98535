"""The pytest plugin (pybroker.testing.plugin, entry point pytest11) run by pytest itself (pytester):
fixtures, options, a failed test's broker log, xdist workers, and no broker outliving its session."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pybroker.testing import EmbeddedBroker

pytest_plugins = ["pytester"]
#: Options of every inner run. The venv's hypothesis and anyio plugins load with any pytest run and have nothing
#: to do with ours; hypothesis's import alone took 1-4 s of each run (and of each xdist worker).
INNER = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:anyio")


def pid_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


RECORD = """
import os
from pathlib import Path

def record(broker, name):
    Path(os.environ["RECORD_DIR"], name).write_text(f"{broker.bootstrap_servers} {broker.pid} {broker.data_dir}")
"""


@pytest.fixture
def record_dir(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = pytester.path / "records"
    directory.mkdir()
    monkeypatch.setenv("RECORD_DIR", str(directory))
    pytester.makepyfile(recording=RECORD)
    return directory


def recorded(directory: Path) -> list[tuple[str, int]]:
    entries = [path.read_text().split() for path in sorted(directory.iterdir())]
    return [(address, int(pid)) for address, pid, _ in entries]


def recorded_dirs(directory: Path) -> list[Path]:
    return [Path(path.read_text().split()[2]) for path in sorted(directory.iterdir())]


#: The cluster fixture's inner test: leadership moves off a killed broker.
CLUSTER_TEST = """
    import time
    from confluent_kafka import Producer

    def produce(bootstrap, topic, value):
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        producer.produce(topic, value)
        assert producer.flush(30) == 0

    def test_failover(kafka_cluster):
        kafka_cluster.create_topic("replicated", config={"min.insync.replicas": 2})
        leader = kafka_cluster.leader("replicated", 0)
        assert leader in (0, 1, 2)
        produce(kafka_cluster.bootstrap_servers, "replicated", b"before")
        kafka_cluster.kill(leader)
        deadline = time.monotonic() + 30
        while kafka_cluster.leader("replicated", 0) in (leader, None) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert kafka_cluster.leader("replicated", 0) not in (leader, None)
        produce(kafka_cluster.bootstrap_servers, "replicated", b"after")
        assert False, "fails on purpose: its report carries every broker's log"
"""


def test_fixtures_options_the_cluster_fixture_and_the_logs_of_failed_tests(pytester: pytest.Pytester,
                                                                           record_dir: Path) -> None:
    pytester.makepyfile(test_inner="""
        import pytest
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient
        from recording import record

        @pytest.mark.kafka_topic(partitions=2)
        def test_round_trip(kafka_broker, kafka_topic):
            record(kafka_broker, "broker")
            assert kafka_topic.startswith("test_round_trip-")
            producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "acks": "all"})
            producer.produce(kafka_topic, b"hello", partition=1)
            assert producer.flush(10) == 0
            topics = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers}).list_topics(timeout=10)
            assert len(topics.topics[kafka_topic].partitions) == 2
            consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "g",
                                 "auto.offset.reset": "earliest"})
            consumer.subscribe([kafka_topic])
            message = None
            for _ in range(40):
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    break
            consumer.close()
            assert message.value() == b"hello"

        def test_auto_created_topics_follow_the_broker_config(kafka_broker):
            producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
            producer.produce("auto-created", b"x")
            assert producer.flush(10) == 0
            topics = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers}).list_topics(timeout=10)
            assert len(topics.topics["auto-created"].partitions) == 3

        def test_crash_recovery(kafka_broker, kafka_topic):
            producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "acks": "all"})
            for i in range(20):
                producer.produce(kafka_topic, str(i).encode(), partition=0)
            assert producer.flush(10) == 0
            kafka_broker.kill()
            kafka_broker.restart()
            record(kafka_broker, "broker-restarted")
            consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "crash",
                                 "auto.offset.reset": "earliest"})
            consumer.subscribe([kafka_topic])
            values = []
            for _ in range(40):
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    values.append(int(message.value()))
                if len(values) == 20:
                    break
            consumer.close()
            assert values == list(range(20))

        def test_fails_on_purpose(kafka_topic):
            assert kafka_topic == "something else"

        def test_leaves_a_broker_running():
            from pybroker.testing import EmbeddedBroker

            record(EmbeddedBroker().start(), "left-running")  # never closed: the session's end stops it
    """)
    pytester.makepyfile(test_cluster=CLUSTER_TEST)  # in the same run: one pytest start-up fewer
    result = pytester.runpytest_subprocess("--kafka-broker-config", "num.partitions=3", *INNER)
    result.assert_outcomes(passed=4, failed=2)
    # The failed test's report carries the broker's log from during that test (its CreateTopics).
    result.stdout.re_match_lines([r".*kafka broker log.*", r".*test_fails_on_purpose-.*"], consecutive=False)
    # The cluster's failover worked, and its failure reports every broker's log.
    result.stdout.fnmatch_lines(["*fails on purpose: its report carries every broker's log*"])
    for broker_id in range(3):
        result.stdout.fnmatch_lines([f"*kafka broker {broker_id} log*"])
    brokers = recorded(record_dir)
    assert len(brokers) == 3  # the session's broker before and after its restart, and the one left running
    assert all(pid_gone(pid, 1.0) for _, pid in brokers), "a broker outlived the pytest run"
    assert not [path for path in recorded_dirs(record_dir) if path.exists()], "a broker's temp dir was left"


def test_no_fixture_no_broker_and_a_bad_config_option_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="""
        import sys

        def test_plain():
            assert "pybroker.testing.plugin" in sys.modules
            assert "pybroker.testing.embedded" not in sys.modules
            assert "pybroker.server" not in sys.modules

        def test_wants_a_broker(kafka_broker):
            pass
    """)
    result = pytester.runpytest_subprocess("--kafka-broker-config", "no-equals-sign", *INNER)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*--kafka-broker-config expects KEY=VALUE*"])


def test_kafka_bootstrap_runs_the_tests_against_an_external_kafka(pytester: pytest.Pytester) -> None:
    with EmbeddedBroker() as external:
        pytester.makepyfile(test_external=f"""
            from confluent_kafka.admin import AdminClient

            def test_uses_it(kafka_broker, kafka_topic):
                assert kafka_broker.bootstrap_servers == "{external.bootstrap_servers}"
                assert not hasattr(kafka_broker, "pid")

            def test_cluster_is_skipped(kafka_cluster):
                pass
        """)
        result = pytester.runpytest_subprocess("--kafka-bootstrap", external.bootstrap_servers, *INNER)
        result.assert_outcomes(passed=1, skipped=1)
        created = AdminClient_topics(external.bootstrap_servers)
        assert any(name.startswith("test_uses_it-") for name in created)


def AdminClient_topics(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def test_two_xdist_workers_get_their_own_brokers(pytester: pytest.Pytester, record_dir: Path) -> None:
    pytester.makepyfile(test_parallel="""
        import pytest
        from confluent_kafka import Producer
        from recording import record

        @pytest.mark.parametrize("n", [0, 1, 2, 3])
        def test_produce(kafka_broker, kafka_topic, worker_id, n):
            record(kafka_broker, worker_id)
            producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "acks": "all"})
            producer.produce(kafka_topic, b"x")
            assert producer.flush(10) == 0
    """)
    result = pytester.runpytest_subprocess("-n", "2", *INNER)
    result.assert_outcomes(passed=4)
    brokers = recorded(record_dir)
    assert len(brokers) == 2 and len({address for address, _ in brokers}) == 2
    assert all(pid_gone(pid, 1.0) for _, pid in brokers)
    assert not list(Path(pytester.path).glob("pybroker-*"))


def test_a_broker_dies_with_a_killed_test_run(pytester: pytest.Pytester, record_dir: Path) -> None:
    started = record_dir / "broker"
    pytester.makepyfile(test_hang="""
        import time
        from recording import record

        def test_hang(kafka_broker):
            record(kafka_broker, "broker")
            time.sleep(120)  # the outer test SIGKILLs this run while the broker is up
    """)
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", *INNER, "test_hang.py"],
                           cwd=pytester.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.05)
        [(_, pid)] = recorded(record_dir)
        os.kill(pid, 0)  # alive while its parent is
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait(30)
    assert pid_gone(pid), "the broker outlived its SIGKILLed parent"
    # Nobody is left to remove its temporary directory after a SIGKILL: the test does.
    for path in recorded_dirs(record_dir):
        shutil.rmtree(path, ignore_errors=True)
