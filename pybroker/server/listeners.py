"""The broker's listeners at run time: what each one is bound with, what it advertises, and how this
broker reaches the others (the inter-broker listener's TLS context for its own client).

TLS material is loaded here, before anything is bound, so a missing or unreadable key store, a
JKS store or a bad principal rule stops start-up with one line naming the key.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl

from pybroker.common.config import BrokerConfig
from pybroker.common.listeners import TLS_PROTOCOLS, Endpoint, Listeners
from pybroker.security.principal import PrincipalMapper
from pybroker.security.tls import broker_settings, client_context, server_context
from pybroker.server.sasl_session import SASL_PROTOCOLS, listener_value
from pybroker.server.socket_server import ListenerSpec

DEFAULT_ADVERTISED_HOST = "localhost"


def listener_specs(config: BrokerConfig) -> list[ListenerSpec]:
    """Every listener of ``listeners``, with a TLS context and principal rules on SSL and SASL_SSL ones,
    and the frame limit before authentication on SASL ones."""
    specs = []
    for endpoint in config.listener_set.bound:
        sasl_limit = listener_value(config, endpoint.listener, "sasl.server.max.receive.size") \
            if endpoint.security_protocol in SASL_PROTOCOLS else None
        if not endpoint.uses_tls:
            specs.append(ListenerSpec(endpoint, sasl_max_receive_size=sasl_limit))
            continue
        settings = broker_settings(config, endpoint.listener, endpoint.security_protocol)
        rules = settings.text("ssl.principal.mapping.rules") or "DEFAULT"
        specs.append(ListenerSpec(endpoint, server_context(settings), PrincipalMapper(rules), sasl_limit))
    return specs


def inter_broker_tls(config: BrokerConfig) -> ssl.SSLContext | None:
    """The context this broker's clients (follower fetcher, controller, transaction markers) use to
    reach other brokers' inter-broker listener, from that listener's own ``ssl.*`` keys (the key
    store then serves as the client certificate, as in Kafka); None if that listener is not TLS."""
    listeners = config.listener_set
    protocol = listeners.protocol_map[listeners.inter_broker]
    if protocol not in TLS_PROTOCOLS:
        return None
    return client_context(broker_settings(config, listeners.inter_broker, protocol))


def advertised_endpoints(listeners: Listeners, bound_ports: dict[str, int]) -> tuple[Endpoint, ...]:
    """``advertised.listeners`` as published: an empty host is ``localhost``, port 0 the bound port."""
    return tuple(Endpoint(e.listener, e.host or DEFAULT_ADVERTISED_HOST, e.port or bound_ports[e.listener],
                          e.security_protocol) for e in listeners.advertised)


def unauthenticated_exposure(config: BrokerConfig) -> list[Endpoint]:
    """Bound listeners that anyone reaching a non-loopback address may use without authenticating:
    PLAINTEXT, or SSL without required client certificates, on a routable host or every interface."""
    exposed = []
    for endpoint in config.listener_set.bound:
        if endpoint.security_protocol in SASL_PROTOCOLS or _is_loopback(endpoint.host):
            continue
        if endpoint.uses_tls and listener_value(config, endpoint.listener, "ssl.client.auth") == "required":
            continue
        exposed.append(endpoint)
    return exposed


def _is_loopback(host: str) -> bool:
    if not host:  # every interface
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: loopback if every address it names is
        try:
            addresses = {info[4][0] for info in socket.getaddrinfo(host, None) if isinstance(info[4][0], str)}
        except OSError:
            return False
        return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)
