"""pybroker: a Kafka-compatible broker in Python. Importing it checks the compiled modules first (common/native.py):
a broken set is refused here with its fix rather than by a failed import later."""

from pybroker.common import native as _native

_native.install()
