"""The controller's requests to brokers (Kafka's ControllerChannelManager): one queue and one sender
task per live broker, so requests to one broker arrive in the order the controller made them and a
slow or dead broker never holds up the others. A failed send reconnects and retries the same request
until the broker is removed (it died: the controller re-sends what matters when it comes back).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from dataclasses import dataclass
from typing import Callable

from pybroker.client.connection import Connection
from pybroker.client.errors import KafkaClientError
from pybroker.client.sasl import SaslCredentials
from pybroker.common.clock import SYSTEM_CLOCK, Clock
from pybroker.protocol.schema import Message

log = logging.getLogger("pybroker.controller")

RETRY_BACKOFF_S = 0.1


ResponseListener = Callable[[int, Message], None]
"""``(broker id, response)``: called with every answer a broker gives the controller."""

ResponseCallback = Callable[[Message | None], None]
"""Called with the answer to one request, or None when it was skipped after an unexpected failure (not
when its broker was removed: the controller handles a broker's loss itself)."""


@dataclass(frozen=True, slots=True)
class Outgoing:
    request: Message
    version: int
    response_type: type[Message]
    on_response: ResponseCallback | None = None


class _BrokerSender:
    def __init__(self, broker_id: int, host: str, port: int, timeout_s: float, tls: ssl.SSLContext | None,
                 sasl: SaslCredentials | None = None, listeners: list[ResponseListener] | None = None,
                 clock: Clock = SYSTEM_CLOCK):
        self.broker_id, self.host, self.port = broker_id, host, port
        self.clock = clock
        self.listeners = listeners if listeners is not None else []
        self.tls = tls
        self.sasl = sasl
        self.timeout_s = timeout_s
        self.queue: asyncio.Queue[Outgoing | None] = asyncio.Queue()  # None: stop
        self.stopped = False
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"controller-to-broker-{broker_id}")

    def stop(self) -> None:
        """Stop after the request in flight. Cancelling alone is not enough: Python 3.11's wait_for
        can swallow a cancellation that races with the response it waited for."""
        self.stopped = True
        self.queue.put_nowait(None)
        self.task.cancel()

    async def _run(self) -> None:
        connection: Connection | None = None
        try:
            while not self.stopped and (item := await self.queue.get()) is not None:
                while not self.stopped:
                    try:
                        if connection is None:
                            connection = await Connection.open(self.host, self.port, tls=self.tls, client_id="controller",
                                                               timeout=self.timeout_s, sasl=self.sasl)
                        response = await connection.send_at(item.request, item.version, item.response_type)
                        code = getattr(response, "error_code", 0)
                        if code:
                            log.warning("Broker %d answered %s with error %d", self.broker_id,
                                        type(item.request).__name__, code)
                        for listener in self.listeners:
                            listener(self.broker_id, response)
                        if item.on_response is not None:
                            item.on_response(response)
                        break
                    except (KafkaClientError, OSError) as exc:
                        log.info("Controller request to broker %d failed (%s); retrying", self.broker_id, exc)
                        await self._reset(connection)
                        connection = None
                    except Exception:
                        # Anything else (a bad answer, a bug) must not end this sender silently: every
                        # later request to the broker would be dropped. Log it and go on with the next.
                        log.exception("Controller request %s to broker %d failed; skipping it",
                                      type(item.request).__name__, self.broker_id)
                        await self._reset(connection)
                        connection = None
                        if item.on_response is not None:
                            item.on_response(None)
                        break
        finally:
            if connection is not None:
                await connection.close()

    async def _reset(self, connection: Connection | None) -> None:
        """Close a connection that failed, after the retry backoff; the caller opens a new one."""
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()
        await self.clock.sleep(RETRY_BACKOFF_S)


class ControllerChannel:
    def __init__(self, timeout_ms: int, tls: ssl.SSLContext | None = None, sasl: SaslCredentials | None = None,
                 clock: Clock = SYSTEM_CLOCK):
        self._timeout_s = timeout_ms / 1000
        self._clock = clock  # the retry backoff's
        self._tls = tls  # the inter-broker listener's
        self._sasl = sasl
        self._senders: dict[int, _BrokerSender] = {}
        self.response_listeners: list[ResponseListener] = []

    def add_broker(self, broker_id: int, host: str, port: int) -> None:
        sender = self._senders.get(broker_id)
        if sender is not None and (sender.host, sender.port) == (host, port):
            return
        self.remove_broker(broker_id)
        self._senders[broker_id] = _BrokerSender(broker_id, host, port, self._timeout_s, self._tls, self._sasl,
                                                 self.response_listeners, self._clock)

    def remove_broker(self, broker_id: int) -> None:
        sender = self._senders.pop(broker_id, None)
        if sender is not None:
            sender.stop()

    def send(self, broker_id: int, request: Message, version: int, response_type: type[Message],
             on_response: ResponseCallback | None = None) -> None:
        sender = self._senders.get(broker_id)
        if sender is not None:
            sender.queue.put_nowait(Outgoing(request, version, response_type, on_response))

    async def ask(self, broker_id: int, request: Message, version: int, response_type: type[Message], *,
                  timeout_s: float) -> Message:
        """One request whose answer the controller waits for, on a connection of its own, beside the
        broker's ordered queue (which may be retrying a request to a broker that is slow to start).
        Raises KafkaClientError or OSError when the broker does not answer, KeyError when it is not live."""
        sender = self._senders[broker_id]
        connection = await Connection.open(sender.host, sender.port, tls=self._tls, client_id="controller",
                                           timeout=min(timeout_s, self._timeout_s), sasl=self._sasl)
        try:
            return await connection.send_at(request, version, response_type)
        finally:
            await connection.close()

    async def close(self) -> None:
        senders = list(self._senders.values())
        self._senders.clear()
        for sender in senders:
            sender.stop()
        for sender in senders:
            with contextlib.suppress(asyncio.CancelledError):
                await sender.task
