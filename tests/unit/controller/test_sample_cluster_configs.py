"""The 3-broker sample cluster in config/ only uses declared keys, is a consistent cluster, and keeps the
requests only brokers send on an inter-broker listener of their own where brokers authenticate."""

from __future__ import annotations

from pathlib import Path

from pybroker.common.config import CONFIG_KEYS, BrokerConfig, _is_listener_override, parse_properties

CONFIG = Path(__file__).resolve().parents[3] / "config"


def test_the_three_sample_brokers_share_a_zookeeper_chroot_and_differ_in_id_port_and_dirs() -> None:
    configs = []
    for index in range(3):
        values = parse_properties((CONFIG / f"server-{index}.properties").read_text())
        assert sorted(k for k in values if k not in CONFIG_KEYS and not _is_listener_override(k)) == []
        configs.append(BrokerConfig(values))
    assert [c["broker.id"] for c in configs] == [0, 1, 2]
    assert len({c["zookeeper.connect"] for c in configs}) == 1 and "/" in configs[0]["zookeeper.connect"]
    assert len({c.listeners[0][2] for c in configs}) == 3
    assert len({c.log_dirs[0] for c in configs}) == 3
    assert all(c["default.replication.factor"] == 3 and c["min.insync.replicas"] == 2 for c in configs)
    for config in configs:
        inter_broker = config.listener_set.inter_broker
        assert config.listener_set.protocol_map[inter_broker].startswith("SASL_")
        assert config.listener_set.bound[0].listener != inter_broker  # clients connect elsewhere


def test_the_sample_zookeeper_config_serves_the_port_the_brokers_use() -> None:
    zookeeper = parse_properties((CONFIG / "zookeeper.properties").read_text())
    broker = parse_properties((CONFIG / "server-0.properties").read_text())
    assert broker["zookeeper.connect"].startswith(f"127.0.0.1:{zookeeper['clientPort']}/")
