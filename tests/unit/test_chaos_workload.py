"""The queue producers' epoch-bump recorder writes to the history of the round that made the producer:
one chaos run makes many rounds in one process, and the librdkafka loggers are looked up by name."""

from __future__ import annotations

import logging

from chaos.history import History
from chaos.workload import _queue_producer

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
