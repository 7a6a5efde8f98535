"""DescribeClientQuotas (48) and AlterClientQuotas (49), with Kafka's filters, checks and messages
(ZkAdminManager's describe, ClientQuotaControlManager's validation): entity types ``user`` and
``client-id`` with a null name for the default; quota keys producer_byte_rate and
consumer_byte_rate (whole numbers), request_percentage and controller_mutation_rate; zero,
negative, fractional longs and unknown keys are INVALID_REQUEST for that entity only. KIP-612's
``ip`` entity stands alone (an address, a host name stored as the address it resolves to, or null for
the default) with one key, connection_creation_rate, a whole number of new connections per second. With an authorizer,
describing needs DescribeConfigs on the cluster and altering AlterConfigs, refused with
CLUSTER_AUTHORIZATION_FAILED as KafkaApis does (for every entry of an alteration).
"""

from __future__ import annotations

import asyncio
import socket

from pybroker.common.client_quotas import (
    CLIENT_ID,
    DEFAULT,
    IP,
    IP_QUOTA_KEYS,
    QUOTA_KEYS,
    USER,
    format_value,
    normalized_ip,
    validate_quota_value,
)
from pybroker.controller.quota_store import Entity, desanitize, sanitize
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from pybroker.security.acl import AclOperation
from pybroker.server.authorization import authorize_cluster
from pybroker.server.context import RequestContext
from pybroker.server.registry import api

Describe = DescribeClientQuotasResponse
Alter = AlterClientQuotasResponse
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
KINDS = (USER, CLIENT_ID, IP)

Refusal = tuple[ErrorCode, str]
Parts = tuple[str | None, str | None, str | None]
"""A stored entity by kind: (user, client-id, ip), each sanitized (an ip as normalized), ``<default>`` or None."""


def _name(kind: str, part: str | None) -> str | None:
    """A stored entity part as the protocol names it: None for the default."""
    if part is None or part == DEFAULT:
        return None
    return part if kind == IP else desanitize(part)


def _filter(request: DescribeClientQuotasRequest) -> dict[str, DescribeClientQuotasRequest.ComponentData] | Refusal:
    components: dict[str, DescribeClientQuotasRequest.ComponentData] = {}
    for component in request.components:
        kind = component.entity_type
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            return (ErrorCode.INVALID_REQUEST, f"Unexpected match type: {component.match_type}")
        if kind in components:
            word = {USER: "user", CLIENT_ID: "client", IP: "IP"}.get(kind, kind)
            return (ErrorCode.INVALID_REQUEST, f"Duplicate {word} filter component entity type")
        if kind == "":
            return (ErrorCode.INVALID_REQUEST, "Unexpected empty filter component entity type")
        if kind not in KINDS:
            return (ErrorCode.UNSUPPORTED_VERSION, f"Custom entity type '{kind}' not supported")
        components[kind] = component
    if IP in components and (USER in components or CLIENT_ID in components):
        return (ErrorCode.INVALID_REQUEST, "Invalid entity filter component combination, IP filter component "
                                           "should not be used with user or clientId filter component.")
    return components


def _matches(kind: str, component: DescribeClientQuotasRequest.ComponentData | None, part: str | None,
             strict: bool) -> bool:
    if component is None:
        return part is None or not strict
    if component.match_type == MATCH_SPECIFIED:
        return part is not None
    if component.match_type == MATCH_DEFAULT:
        return part == DEFAULT
    wanted = (normalized_ip(component.match or "") or component.match) if kind == IP else component.match
    return part is not None and part != DEFAULT and _name(kind, part) == wanted


@api(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1)
async def describe(ctx: RequestContext, request: DescribeClientQuotasRequest) -> Describe:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE_CONFIGS):
        refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return Describe(throttle_time_ms=0, error_code=refused, error_message=refused.message, entries=None)
    components = _filter(request)
    if isinstance(components, tuple):
        return Describe(throttle_time_ms=0, error_code=components[0], error_message=components[1], entries=None)
    store = ctx.services.quotas.store
    stored: list[tuple[Parts, dict[str, str]]] = [((user, client, None), dict(quotas))
                                                  for (user, client), quotas in store.all().items()]
    stored += [((None, None, ip), dict(quotas)) for ip, quotas in store.ips().items()]
    entries = []
    for parts, quotas in sorted(stored, key=lambda item: str(item[0])):
        if not quotas or not all(_matches(kind, components.get(kind), part, request.strict)
                                 for kind, part in zip(KINDS, parts)):
            continue
        entity = [Describe.EntityData(entity_type=kind, entity_name=_name(kind, part))
                  for kind, part in zip(KINDS, parts) if part is not None]
        values = [Describe.ValueData(key=key, value=float(value)) for key, value in sorted(quotas.items())]
        entries.append(Describe.EntryData(entity=entity, values=values))
    return Describe(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, entries=entries)


async def _addresses(request: AlterClientQuotasRequest) -> dict[str, str | None]:
    """Each ip entity name of the request as stored: its address, or a host's first one (None: neither)."""
    found: dict[str, str | None] = {}
    for entry in request.entries:
        for item in entry.entity:
            name = item.entity_name
            if item.entity_type == IP and name and name not in found:
                found[name] = normalized_ip(name)
                if found[name] is None:
                    try:
                        infos = await asyncio.get_running_loop().getaddrinfo(name, None, type=socket.SOCK_STREAM)
                        found[name] = normalized_ip(str(infos[0][4][0]))
                    except (OSError, UnicodeError, IndexError):
                        pass
    return found


def _entity(entry: AlterClientQuotasRequest.EntryData, addresses: dict[str, str | None]) -> Entity | str | Refusal:
    """The stored entity of an alteration ((user, client-id), or an ip's address), or Kafka's refusal."""
    if not entry.entity:
        return (ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    parts: dict[str, str] = {}
    for item in entry.entity:
        kind, name = item.entity_type, item.entity_name
        if kind in parts:
            return (ErrorCode.INVALID_REQUEST, f"Invalid client quota entity, duplicate entity "
                                                               f"entry {kind}")
        if kind not in KINDS:
            return (ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {kind}")
        if name is not None and name == "":
            return (ErrorCode.INVALID_REQUEST, f"Empty {kind} not supported")
        if kind == IP:
            ip = DEFAULT if name is None else addresses.get(name)
            if ip is None:
                return (ErrorCode.INVALID_REQUEST, f"{name} is not a valid IP or resolvable host.")
            parts[kind] = ip
        else:
            parts[kind] = DEFAULT if name is None else sanitize(name)
    if IP in parts:
        if len(parts) > 1:
            return (ErrorCode.INVALID_REQUEST, "Invalid quota entity combination, IP entity should not be used "
                                               "with user/client ID entity.")
        return parts[IP]
    return parts.get(USER), parts.get(CLIENT_ID)


def _altered(entry: AlterClientQuotasRequest.EntryData, current: dict[str, str],
             keys: dict[str, str]) -> dict[str, str] | Refusal:
    config = dict(current)
    for op in entry.ops:
        if op.remove:
            config.pop(op.key, None)
            continue
        refusal = validate_quota_value(op.key, op.value, keys)
        if refusal is not None:
            return ErrorCode.INVALID_REQUEST, refusal
        config[op.key] = format_value(op.key, op.value)
    return config


@api(ApiKey.ALTER_CLIENT_QUOTAS, 0, 1)
async def alter(ctx: RequestContext, request: AlterClientQuotasRequest) -> Alter:
    store = ctx.services.quotas.store
    allowed = authorize_cluster(ctx, AclOperation.ALTER_CONFIGS)
    addresses = await _addresses(request) if allowed else {}
    results = []
    for entry in request.entries:
        code: ErrorCode = ErrorCode.NONE
        message: str | None = None
        entity = _entity(entry, addresses)
        if not allowed:
            code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED.message
        elif isinstance(entity, tuple) and isinstance(entity[0], ErrorCode):
            code, message = entity
        else:
            ip = entity if isinstance(entity, str) else None
            current = store.ips().get(ip, {}) if ip is not None else store.all().get(entity, {})  # type: ignore[arg-type]
            config = _altered(entry, dict(current), IP_QUOTA_KEYS if ip is not None else QUOTA_KEYS)
            if isinstance(config, tuple):
                code, message = config
            elif not request.validate_only:
                if ip is not None:
                    await store.set_ip_quotas(ip, config)
                else:
                    await store.set_quotas(entity, config)  # type: ignore[arg-type]
        results.append(Alter.EntryData(
            error_code=code, error_message=message,
            entity=[Alter.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity]))
    return Alter(throttle_time_ms=0, entries=results)
