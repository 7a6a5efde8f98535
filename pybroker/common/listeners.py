"""Listeners as Kafka configures them: names, security protocols, bound and advertised endpoints.

A listener is ``NAME://host:port``. Its security protocol comes from
``listener.security.protocol.map`` (by default each of Kafka's four protocols maps to itself, so
``SSL://:9093`` is an SSL listener and ``INTERNAL://:9094`` needs ``INTERNAL:SSL`` or similar).
Brokers talk to each other on one listener: ``inter.broker.listener.name``, or the listener named
after ``security.inter.broker.protocol`` (PLAINTEXT by default); both set is an error, as in Kafka.
The checks below are Kafka's (KafkaConfig.validateValues and listenerListToEndPoints), with its
wording, so that a broken config fails at start-up with one line naming the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

from pybroker.common.config_error import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: Kafka's SecurityProtocol ids, as UpdateMetadata carries them.
SECURITY_PROTOCOL_IDS = {name: index for index, name in enumerate(SECURITY_PROTOCOLS)}
SECURITY_PROTOCOL_NAMES = dict(enumerate(SECURITY_PROTOCOLS))
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener's address: where it binds (``host`` may be empty: every interface) or where
    clients are told to connect."""

    listener: str
    host: str
    port: int
    security_protocol: str

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in TLS_PROTOCOLS

    def uri(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Listeners:
    """The validated listener configuration of one broker."""

    bound: tuple[Endpoint, ...]
    advertised: tuple[Endpoint, ...]
    protocol_map: dict[str, str]
    inter_broker: str
    control_plane: str | None

    def advertised_endpoint(self, listener: str) -> Endpoint:
        return next(e for e in self.advertised if e.listener == listener)


class ListenerSettings(Protocol):
    """The keys these checks read, as config.py's BrokerConfig holds them (typed values, and whether a key
    was set or is at its default): config.py runs the checks when it is built, so they cannot name it."""

    def __getitem__(self, name: str) -> Any: ...

    def is_set(self, name: str) -> bool: ...


def parse_listener(uri: str) -> tuple[str, str, int]:
    """Split `NAME://host:port` into (name, host, port); an empty host means all interfaces."""
    match = re.fullmatch(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:/]*):(\d+)", uri.strip())
    if not match:
        raise ValueError("listener must look like PLAINTEXT://host:port")
    host = match.group(2).strip("[]")
    port = int(match.group(3))
    if port > 65535:
        raise ValueError(f"port {port} out of range")
    return match.group(1), host, port


def parse_protocol_map(text: str) -> dict[str, str]:
    """``NAME:PROTOCOL,...``; ConfigError for a malformed entry or an unknown protocol."""
    result: dict[str, str] = {}
    for item in filter(None, (entry.strip() for entry in text.split(","))):
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"Invalid value {text} for configuration listener.security.protocol.map: "
                              f"Map entry '{item}' is invalid: expected LISTENER_NAME:{'|'.join(SECURITY_PROTOCOLS)}")
        if name in result:
            raise ConfigError(f"Invalid value {text} for configuration listener.security.protocol.map: "
                              f"Map entry '{item}' names listener {name} twice")
        result[name] = protocol
    return result


def listeners_from_config(config: ListenerSettings) -> Listeners:
    """Kafka's listener checks, in its order; ConfigError with its wording for the first failure."""
    protocol_map = parse_protocol_map(config["listener.security.protocol.map"])

    def endpoints(key: str, uris: list[str]) -> tuple[Endpoint, ...]:
        result = []
        for uri in uris:
            name, host, port = parse_listener(uri)
            name = name.upper()
            protocol = protocol_map.get(name)
            if protocol is None:
                raise ConfigError(f"Error creating broker listeners from '{','.join(uris)}' ({key}): "
                                  f"No security protocol defined for listener {name} "
                                  f"(listener.security.protocol.map)")
            result.append(Endpoint(name, host, port, protocol))
        names = [e.listener for e in result]
        if len(set(names)) != len(names):
            raise ConfigError(f"requirement failed: Each listener must have a different name, {key}: "
                              f"{','.join(uris)}")
        return tuple(result)

    bound = endpoints("listeners", config["listeners"])
    ports = [e.port for e in bound if e.port != 0]
    if len(set(ports)) != len(ports):
        raise ConfigError(f"requirement failed: Each listener must have a different port, listeners: "
                          f"{','.join(config['listeners'])}")
    advertised = endpoints("advertised.listeners", config["advertised.listeners"] or config["listeners"])
    bound_names = [e.listener for e in bound]
    extra = [e.listener for e in advertised if e.listener not in bound_names]
    if extra:
        raise ConfigError(f"requirement failed: advertised.listeners listener names must be equal to or a subset "
                          f"of the ones defined in listeners. Found {','.join(extra)}. The valid options based on "
                          f"the current configuration are {','.join(bound_names)}")
    inter_broker = _inter_broker_listener(config, protocol_map)
    advertised_names = [e.listener for e in advertised]
    if inter_broker not in advertised_names:
        raise ConfigError(f"requirement failed: inter.broker.listener.name must be a listener name defined in "
                          f"advertised.listeners. The valid options based on currently configured listeners are "
                          f"{','.join(advertised_names)}")
    control_plane = config["control.plane.listener.name"]
    if control_plane is not None:
        control_plane = control_plane.upper()
        if control_plane not in bound_names:
            raise ConfigError(f"requirement failed: control.plane.listener.name must be a listener name defined "
                              f"in listeners. The valid options based on currently configured listeners are "
                              f"{','.join(bound_names)}")
        if control_plane == inter_broker:
            raise ConfigError("requirement failed: control.plane.listener.name, if set, must be different from "
                              "inter.broker.listener.name")
    return Listeners(bound, advertised, protocol_map, inter_broker, control_plane)


def _inter_broker_listener(config: ListenerSettings, protocol_map: dict[str, str]) -> str:
    name, protocol = config["inter.broker.listener.name"], config["security.inter.broker.protocol"]
    if name is not None and config.is_set("security.inter.broker.protocol"):
        raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.")
    if name is None:
        return str(protocol).upper()
    name = name.upper()
    if name not in protocol_map:
        raise ConfigError(f"Listener with name {name} defined in inter.broker.listener.name not found in "
                          f"listener.security.protocol.map.")
    return name
