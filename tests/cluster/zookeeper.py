"""A real ZooKeeper server (Debian's `zookeeper` package, tools/install-system-deps.sh) as a child
process on a free loopback port, with its data in a temporary directory: pybroker.testing's, which
other projects' tests use too (it also dies with its parent and retries a port taken meanwhile)."""

from pybroker.testing.zookeeper import ZooKeeperServer

__all__ = ["ZooKeeperServer"]
