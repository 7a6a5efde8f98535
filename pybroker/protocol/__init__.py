"""Kafka wire protocol: primitives, generated message classes, framing and error codes.

Sans-IO by design: nothing here touches sockets or asyncio, so the same code
serves the broker, the tests and any client-side tooling.
"""
