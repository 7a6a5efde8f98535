"""Chaos round 9401: while the harness had a broker down, a parallel test's broker listened on the down
broker's port, and the workload's producer, dialing the down broker's proxy, reached it: it auto-created
`queue` with one partition and acknowledged acks=all records at offsets 0-3, which the cluster's queue-0
already held (the checker saw them as lost and divergent). Here a real broker is that stranger: a proxy
whose target process is not the one listening on its target port must not let a client reach it."""

from __future__ import annotations

from confluent_kafka import KafkaError, Producer

from chaos.proxy import Proxy, ProxyHost
from tests.integration.broker_process import BrokerProcess

REFUSED_MS = 3000  # how long a producer tries when it is expected never to get through
DELIVERED_MS = 30000


def _produce_once(bootstrap: str, timeout_ms: int) -> tuple[KafkaError | None, int | None]:
    """One acks=all record to queue-0 (idempotent, as the chaos workload's): its error and offset."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "message.timeout.ms": timeout_ms, "request.timeout.ms": min(timeout_ms, 5000),
                         "log_level": 0})
    outcome: list[tuple[KafkaError | None, int | None]] = []
    producer.produce("queue", b"p0-2040", b"k24", partition=0,
                     on_delivery=lambda err, msg: outcome.append((err, msg.offset())))
    assert producer.flush(timeout_ms / 1000 + 10) == 0
    return outcome[0]


def test_a_client_of_a_down_brokers_proxy_never_reaches_a_stranger_on_its_port(broker: BrokerProcess) -> None:
    assert broker.process is not None and broker.port is not None
    target: list[int | None] = [None]  # the proxy's own broker is down
    host = ProxyHost()
    try:
        proxy = host.add(Proxy("b0", lambda: {}, lambda: target[0]))
        proxy.target_port = broker.port
        error, offset = _produce_once(f"127.0.0.1:{proxy.port}", REFUSED_MS)
        assert error is not None, f"acknowledged at offset {offset} by a broker that is not the proxy's"
        assert proxy.strangers > 0
        target[0] = broker.process.pid  # once the listener is the proxy's own broker, it is reached
        error, offset = _produce_once(f"127.0.0.1:{proxy.port}", DELIVERED_MS)
        assert error is None and offset == 0
    finally:
        host.close()

