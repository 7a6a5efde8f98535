"""A broker loads what it may not need only when it does: ZooKeeper's client (kazoo.client) and the ZooKeeper
controller in ZooKeeper mode, the schema registry's server (and the Kafka client it uses) and prometheus_client
when configured, the compression codecs at the first compressed batch, importlib.metadata (email, csv, zipfile)
at the first outgoing connection. Together they were ~8 MiB of an idle single node's resident memory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
CONFIGURED_MODULES = ("pybroker.server.schema_registry", "pybroker.schema_registry.service", "pybroker.client.admin",
                      "pybroker.server.broker_metrics", "prometheus_client")
OPTIONAL_MODULES = ("kazoo.client", "pybroker.server.zk_mode", "pybroker.controller.controller", *CONFIGURED_MODULES,
                    "snappy", "lz4.frame", "zstandard", "importlib.metadata")
# Checks the config as `pybroker serve` does, starts and stops the real broker (embedded metadata), then
# prints which of the optional modules the process holds.
SCRIPT = """
import asyncio, sys
from pybroker.common.config import BrokerConfig
from pybroker.server.config_check import check_config

config = BrokerConfig.load(None, sys.argv[2:], {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": sys.argv[1]})
check_config(config)

async def start_and_stop():
    from pybroker.server.broker import Broker
    broker = Broker(config)
    await broker.start()
    await broker.stop()

asyncio.run(start_and_stop())
print(" ".join(name for name in %r if name in sys.modules))
""" % (OPTIONAL_MODULES,)


def loaded_optional_modules(tmp_path: Path, *overrides: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "logs"), *overrides], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_a_default_single_node_loads_none_of_them(tmp_path: Path) -> None:
    assert loaded_optional_modules(tmp_path) == []


def test_each_loads_when_configured(tmp_path: Path) -> None:
    """The other side of the check: the same script sees them once the registry and the metrics are on."""
    loaded = loaded_optional_modules(tmp_path, "schema.registry.listeners=http://127.0.0.1:0", "metrics.port=0")
    assert set(CONFIGURED_MODULES) <= set(loaded)  # (prometheus_client's exposition imports snappy too)
