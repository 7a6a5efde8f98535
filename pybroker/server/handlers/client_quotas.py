"""DescribeClientQuotas (48) and AlterClientQuotas (49), with Kafka's filters, checks and messages
(ZkAdminManager's describe, ClientQuotaControlManager's validation): entity types ``user`` and
``client-id`` with a null name for the default; quota keys producer_byte_rate and
consumer_byte_rate (whole numbers), request_percentage and controller_mutation_rate; zero,
negative, fractional longs and unknown keys are INVALID_REQUEST for that entity only. With an
authorizer, describing needs DescribeConfigs on the cluster and altering AlterConfigs, refused with
CLUSTER_AUTHORIZATION_FAILED as KafkaApis does (for every entry of an alteration).
"""

from __future__ import annotations

from pybroker.common.client_quotas import CLIENT_ID, DEFAULT, USER, format_value, validate_quota_value
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


Refusal = tuple[ErrorCode, str]


def _name(part: str | None) -> str | None:
    """A stored entity part as the protocol names it: None for the default."""
    return None if part is None or part == DEFAULT else desanitize(part)


def _filter(request: DescribeClientQuotasRequest) -> dict[str, DescribeClientQuotasRequest.ComponentData] | Refusal:
    components: dict[str, DescribeClientQuotasRequest.ComponentData] = {}
    for component in request.components:
        kind = component.entity_type
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            return (ErrorCode.INVALID_REQUEST, f"Unexpected match type: {component.match_type}")
        if kind in components:
            word = "user" if kind == USER else "client"
            return (ErrorCode.INVALID_REQUEST, f"Duplicate {word} filter component entity type")
        if kind == "":
            return (ErrorCode.INVALID_REQUEST, "Unexpected empty filter component entity type")
        if kind not in (USER, CLIENT_ID):
            return (ErrorCode.UNSUPPORTED_VERSION, f"Custom entity type '{kind}' not supported")
        components[kind] = component
    return components


def _matches(component: DescribeClientQuotasRequest.ComponentData | None, part: str | None, strict: bool) -> bool:
    if component is None:
        return part is None or not strict
    if component.match_type == MATCH_SPECIFIED:
        return part is not None
    if component.match_type == MATCH_DEFAULT:
        return part == DEFAULT
    return part is not None and part != DEFAULT and desanitize(part) == component.match


@api(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1)
async def describe(ctx: RequestContext, request: DescribeClientQuotasRequest) -> Describe:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE_CONFIGS):
        refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return Describe(throttle_time_ms=0, error_code=refused, error_message=refused.message, entries=None)
    components = _filter(request)
    if isinstance(components, tuple):
        return Describe(throttle_time_ms=0, error_code=components[0], error_message=components[1], entries=None)
    entries = []
    for (user, client), quotas in sorted(ctx.broker.quotas.store.all().items(), key=lambda i: str(i[0])):
        if not quotas or not _matches(components.get(USER), user, request.strict) \
                or not _matches(components.get(CLIENT_ID), client, request.strict):
            continue
        entity = [Describe.EntityData(entity_type=kind, entity_name=_name(part))
                  for kind, part in ((USER, user), (CLIENT_ID, client)) if part is not None]
        values = [Describe.ValueData(key=key, value=float(value)) for key, value in sorted(quotas.items())]
        entries.append(Describe.EntryData(entity=entity, values=values))
    return Describe(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, entries=entries)


def _entity(entry: AlterClientQuotasRequest.EntryData) -> Entity | Refusal:
    """The stored entity of an alteration, or Kafka's refusal."""
    if not entry.entity:
        return (ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    parts: dict[str, str] = {}
    for item in entry.entity:
        kind, name = item.entity_type, item.entity_name
        if kind in parts:
            return (ErrorCode.INVALID_REQUEST, f"Invalid client quota entity, duplicate entity "
                                                               f"entry {kind}")
        if kind not in (USER, CLIENT_ID):  # ip (connection_creation_rate) quotas are not supported
            return (ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {kind}")
        if name is not None and name == "":
            return (ErrorCode.INVALID_REQUEST, f"Empty {kind} not supported")
        parts[kind] = DEFAULT if name is None else sanitize(name)
    return parts.get(USER), parts.get(CLIENT_ID)


def _altered(entry: AlterClientQuotasRequest.EntryData, current: dict[str, str]) -> dict[str, str] | Refusal:
    config = dict(current)
    for op in entry.ops:
        if op.remove:
            config.pop(op.key, None)
            continue
        refusal = validate_quota_value(op.key, op.value)
        if refusal is not None:
            return ErrorCode.INVALID_REQUEST, refusal
        config[op.key] = format_value(op.key, op.value)
    return config


@api(ApiKey.ALTER_CLIENT_QUOTAS, 0, 1)
async def alter(ctx: RequestContext, request: AlterClientQuotasRequest) -> Alter:
    store = ctx.broker.quotas.store
    allowed = authorize_cluster(ctx, AclOperation.ALTER_CONFIGS)
    results = []
    for entry in request.entries:
        code: ErrorCode = ErrorCode.NONE
        message: str | None = None
        entity = _entity(entry)
        if not allowed:
            code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED.message
        elif isinstance(entity[0], ErrorCode):
            code, message = entity  # type: ignore[assignment]
        else:
            config = _altered(entry, dict(store.all().get(entity, {})))  # type: ignore[arg-type]
            if isinstance(config, tuple):
                code, message = config
            elif not request.validate_only:
                await store.set_quotas(entity, config)  # type: ignore[arg-type]
        results.append(Alter.EntryData(
            error_code=code, error_message=message,
            entity=[Alter.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity]))
    return Alter(throttle_time_ms=0, entries=results)
