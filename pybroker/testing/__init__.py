"""pybroker as the embedded Kafka of other projects' tests: ``EmbeddedBroker``, ``AsyncEmbeddedBroker``,
``EmbeddedCluster`` (with a real ZooKeeper) and the pytest plugin (``pybroker.testing.plugin``, loaded
through the ``pytest11`` entry point). Imported lazily: loading the plugin starts nothing and imports
nothing heavy until a test asks for a fixture."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pybroker.testing.cluster import EmbeddedCluster
    from pybroker.testing.embedded import AsyncEmbeddedBroker, EmbeddedBroker, EmbeddedBrokerError

__all__ = ["AsyncEmbeddedBroker", "EmbeddedBroker", "EmbeddedBrokerError", "EmbeddedCluster"]


def __getattr__(name: str) -> Any:
    if name == "EmbeddedCluster":
        from pybroker.testing.cluster import EmbeddedCluster

        return EmbeddedCluster
    if name in __all__:
        from pybroker.testing import embedded

        return getattr(embedded, name)
    raise AttributeError(f"module 'pybroker.testing' has no attribute {name!r}")
