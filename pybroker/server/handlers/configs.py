"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44) for topics, brokers, client-metrics
subscriptions and (share) groups.

Broker configs are static (read from the properties file); altering them is refused with
INVALID_REQUEST. Topic overrides are stored with the topic by the metadata owner.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from pybroker.common.config import (
    CONFIG_KEYS,
    DYNAMIC_KEYS,
    LISTENER_PREFIX,
    BrokerConfig,
    ConfigError,
    parse_value,
    value_text,
)
from pybroker.common.topic import topic_name_error
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from pybroker.security.acl import AclOperation
from pybroker.server.authorization import config_refusal
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for, error_message_for
from pybroker.server import share_group_configs
from pybroker.server.registry import api
from pybroker.server.telemetry import configs as client_metrics_configs
from pybroker.server.topic_configs import (
    CONFIG_TYPES,
    DEFAULT_CONFIG,
    STATIC_BROKER_CONFIG,
    DescribedConfig,
    Synonym,
    broker_synonyms,
)

TOPIC = 2
BROKER = 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = DescribeConfigsResponse.DescribeConfigsResourceResult


@api(ApiKey.DESCRIBE_CONFIGS, 1, 4)
async def describe_configs(ctx: RequestContext, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    results = []
    for resource in request.resources:
        result = Result(error_code=0, resource_type=resource.resource_type, resource_name=resource.resource_name,
                        configs=[])
        refused = config_refusal(ctx, AclOperation.DESCRIBE_CONFIGS, resource.resource_type, resource.resource_name)
        described = (refused, refused.message) if refused is not None else _describe(ctx, resource)
        if isinstance(described, tuple):
            result.error_code, result.error_message = described
        else:
            result.configs = [_entry(c, request.include_synonyms, request.include_documentation) for c in described]
        results.append(result)
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


def _describe(ctx: RequestContext, resource: DescribeConfigsRequest.DescribeConfigsResource
              ) -> list[DescribedConfig] | tuple[int, str]:
    services = ctx.services
    keys = resource.configuration_keys
    name = resource.resource_name
    if resource.resource_type == TOPIC:
        invalid = topic_name_error(name)
        if invalid:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, invalid
        info = services.metadata.topic(name)
        if info is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ""  # Kafka sets no message here
        return services.topic_configs.describe(info.configs, keys)
    if resource.resource_type == BROKER:
        if name == "":
            return []  # the dynamic cluster-wide defaults, of which a static broker has none
        if not name.lstrip("-").isdigit():
            return ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
        if int(name) != services.broker_id:
            return ErrorCode.INVALID_REQUEST, (f"Unexpected broker id, expected {services.broker_id} or empty string, "
                                               f"but received {name}")
        return _broker_configs(ctx, keys)
    if resource.resource_type == client_metrics_configs.CLIENT_METRICS:
        return client_metrics_configs.describe(ctx, name, keys)
    if resource.resource_type == share_group_configs.GROUP:
        return share_group_configs.describe(ctx, name, keys)
    return ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {resource.resource_type}"


def _broker_configs(ctx: RequestContext, keys: list[str] | None) -> list[DescribedConfig]:
    """Kafka's createBrokerConfigEntry: read-only unless the key is dynamic in Kafka, password values
    hidden, the source that of the first synonym."""
    config = ctx.services.config
    described = []
    for key in CONFIG_KEYS.values():
        if keys and key.name not in keys:  # Kafka: a null or empty key list asks for every key
            continue
        sensitive = key.type == "password"
        synonyms = broker_synonyms(config, key.name)
        if sensitive:
            synonyms = tuple(replace(synonym, value=None) for synonym in synonyms)
        described.append(DescribedConfig(
            key.name, None if sensitive else value_text(config[key.name]),
            synonyms[0].source if synonyms else DEFAULT_CONFIG, CONFIG_TYPES.get(key.type, 2), key.doc, synonyms,
            read_only=key.name not in DYNAMIC_KEYS, is_sensitive=sensitive))
    return described + [_original_config(config, name) for name in sorted(config.raw)
                        if name not in CONFIG_KEYS and (not keys or name in keys)]


def _original_config(config: BrokerConfig, name: str) -> DescribedConfig:
    """A key the properties set that is not declared (a listener override, a plugin's key): Kafka describes
    its originals too, typed as the key a listener override stands for; a key of unknown type is
    sensitive (KafkaConfig.maybeSensitive), its value hidden."""
    base = _listener_override_base(name)
    key = CONFIG_KEYS.get(base) if base is not None else None
    sensitive = key is None or key.type == "password"
    value = None if sensitive else config.raw[name]
    return DescribedConfig(name, value, STATIC_BROKER_CONFIG, CONFIG_TYPES.get(key.type, 2) if key else 0,
                           key.doc if key else "", (Synonym(name, value, STATIC_BROKER_CONFIG),),
                           read_only=True, is_sensitive=sensitive)


def _listener_override_base(name: str) -> str | None:
    """``listener.name.<listener>.[<sasl mechanism>.]<key>`` -> ``<key>``; None for any other name."""
    if not name.startswith(LISTENER_PREFIX):
        return None
    rest = name[len(LISTENER_PREFIX):].partition(".")[2]
    return rest if rest in CONFIG_KEYS else rest.partition(".")[2]


def _entry(config: DescribedConfig, include_synonyms: bool, include_documentation: bool) -> Entry:
    synonyms = [DescribeConfigsResponse.DescribeConfigsSynonym(name=s.name, value=s.value, source=s.source)
                for s in config.synonyms] if include_synonyms else []
    return Entry(name=config.name, value=config.value, read_only=config.read_only,
                 config_source=config.source, is_sensitive=config.is_sensitive, synonyms=synonyms,
                 config_type=config.config_type, documentation=config.doc if include_documentation else None)


@api(ApiKey.ALTER_CONFIGS, 0, 2)
async def alter_configs(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    responses = []
    for resource in request.resources:
        new_configs = {c.name: c.value for c in resource.configs}
        code, message = await _apply(ctx, resource.resource_type, resource.resource_name,
                                     lambda _: new_configs, request.validate_only)
        responses.append(AlterConfigsResponse.AlterConfigsResourceResponse(
            error_code=code, error_message=message, resource_type=resource.resource_type,
            resource_name=resource.resource_name))
    return AlterConfigsResponse(throttle_time_ms=0, responses=responses)


@api(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def incremental_alter_configs(ctx: RequestContext,
                                    request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    responses = []
    for resource in request.resources:
        def edit(current: Mapping[str, str], ops=resource.configs) -> dict[str, str]:
            updated = dict(current)
            for op in ops:
                if op.config_operation == SET:
                    updated[op.name] = op.value
                elif op.config_operation == DELETE:
                    updated.pop(op.name, None)
                elif op.config_operation in (APPEND, SUBTRACT):
                    updated[op.name] = _edit_list(ctx, updated, op.name, op.config_operation, op.value or "")
                else:
                    raise ValueError(f"Unknown config operation {op.config_operation}")
            return updated

        code, message = await _apply(ctx, resource.resource_type, resource.resource_name, edit,
                                     request.validate_only)
        responses.append(IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
            error_code=code, error_message=message, resource_type=resource.resource_type,
            resource_name=resource.resource_name))
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=responses)


def _edit_list(ctx: RequestContext, overrides: Mapping[str, str], name: str, operation: int, value: str) -> str:
    """APPEND or SUBTRACT as Kafka does them: on the effective value (the override, else the broker
    default), for list configs only; subtracting every item leaves an empty list, which is stored."""
    described = next(iter(ctx.services.topic_configs.describe(overrides, [name])), None)
    if described is None or described.config_type != CONFIG_TYPES["list"]:
        verb = "append" if operation == APPEND else "subtract"
        raise ValueError(f"Config value {verb} is not allowed for config key: {name}")
    current = overrides.get(name, described.value) or ""
    items = [item for item in current.split(",") if item]
    given = [item for item in value.split(",") if item]
    if operation == APPEND:
        return ",".join(dict.fromkeys(items + given))
    return ",".join(item for item in items if item not in given)


async def _apply(ctx: RequestContext, resource_type: int, name: str, edit, validate_only: bool) -> tuple[int, str | None]:
    services = ctx.services
    refused = config_refusal(ctx, AclOperation.ALTER_CONFIGS, resource_type, name)
    if refused is not None:
        return refused, None  # Kafka: ApiError(error, null)
    if resource_type == client_metrics_configs.CLIENT_METRICS:
        return await client_metrics_configs.apply(ctx, name, edit, validate_only)
    if resource_type == share_group_configs.GROUP:
        return await share_group_configs.apply(ctx, name, edit, validate_only)
    if resource_type != TOPIC:
        try:
            return _refuse_broker_change(edit({}), name)
        except ValueError as exc:  # APPEND/SUBTRACT on a broker key
            return ErrorCode.INVALID_CONFIG, str(exc)
    info = services.metadata.topic(name)
    if info is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist"
    try:
        updated = edit(info.configs)
        if validate_only:
            services.validate_topic_configs(updated)
        else:
            await services.metadata.alter_topic_configs(name, updated)
    except ValueError as exc:
        return ErrorCode.INVALID_CONFIG, str(exc)
    except Exception as exc:
        return error_code_for(exc), error_message_for(exc)
    return ErrorCode.NONE, None


def _refuse_broker_change(changes: Mapping[str, str | None], broker_id: str) -> tuple[int, str]:
    """A broker's configs are static here: a value it could not take is named as such (INVALID_CONFIG, as
    Kafka's validation answers), any other change is refused naming the keys."""
    for key, value in changes.items():
        if key in CONFIG_KEYS and value is not None:
            try:
                parse_value(key, CONFIG_KEYS[key], value)
            except ConfigError as exc:
                return ErrorCode.INVALID_CONFIG, str(exc)
    return ErrorCode.INVALID_REQUEST, (f"Cannot update these configs of broker {broker_id or '(default)'}: "
                                       f"{', '.join(sorted(changes))}: pybroker's broker configs are static "
                                       "(set them in server.properties and restart the broker)")
