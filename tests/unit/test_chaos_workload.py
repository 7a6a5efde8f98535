"""The queue producers' epoch-bump recorder writes to the history of the round that made the producer:
one chaos run makes many rounds in one process, and the librdkafka loggers are looked up by name. A
fatal error reaches the queue producer's loop as the KafkaException it is, also when confluent-kafka
wraps it in a SystemError from the logger."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException

from chaos.history import History
from chaos.workload import _kafka_error_of, _queue_producer

BUMP = ("DRAIN [rdkafka#producer-1] [thrd:main]: Beginning partition drain for PID{Id:1000,Epoch:0} epoch bump "
        "for 1 partition(s) with in-flight requests: skipped sequence numbers")


def test_a_later_rounds_producer_records_into_its_own_history() -> None:
    first, second = History(), History()
    _queue_producer("127.0.0.1:1", first, "p0")
    _queue_producer("127.0.0.1:1", second, "p0")
    logging.getLogger("chaos.rdkafka.p0").debug(BUMP)
    logging.getLogger("chaos.rdkafka.p0").debug("IDEMPSTATE [rdkafka#producer-1]: state change Init -> RequestPID")
    assert [e["type"] for e in first.events] == []
    assert [(e["type"], e["process"], e["detail"]) for e in second.events] == [("epoch-bump", "p0", BUMP)]


def test_a_fatal_error_is_found_behind_the_loggers_system_error() -> None:
    fatal = KafkaException(KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, fatal=True))
    assert _kafka_error_of(fatal) is fatal
    try:
        raise SystemError("<class 'logging.LogRecord'> returned a result with an exception set") from fatal
    except SystemError as wrapped:
        assert _kafka_error_of(wrapped) is fatal
    other = SystemError("an unrelated failure")
    with pytest.raises(SystemError, match="unrelated"):
        _kafka_error_of(other)
