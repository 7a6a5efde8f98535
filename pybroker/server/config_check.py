"""The start-up checks of a broker config that read no log and reach no other server.

`pybroker serve` runs them before the broker logs anything, so a value that cannot be used stops it with one
line naming the key as the user wrote it (ConfigError), the same line whichever part of the broker refuses it.
"""

from __future__ import annotations

from pybroker.common.clock import SystemClock
from pybroker.common.config import BrokerConfig
from pybroker.server.authorization import build_authorizer
from pybroker.server.listeners import listener_specs
from pybroker.server.sasl_session import SaslAuthenticator
from pybroker.server.socket_server import ConnectionLimits
from pybroker.server.topic_configs import TopicConfigs


def check_config(config: BrokerConfig) -> None:
    """Raise ConfigError for the first setting the broker would refuse at start-up."""
    TopicConfigs(config)  # broker defaults of topic configs, checked as topic values
    listener_specs(config)  # TLS material and principal rules
    SaslAuthenticator(config, lambda: None, SystemClock())  # SASL mechanisms and their JAAS settings
    build_authorizer(config)
    ConnectionLimits.from_config(config)
    if config["schema.registry.listeners"]:
        from pybroker.server.schema_registry import registry_listener  # loaded only for a broker that serves it

        registry_listener(config)
