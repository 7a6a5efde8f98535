"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44) for topics and brokers.

Broker configs are static (read from the properties file); altering them is refused with
INVALID_REQUEST. Topic overrides are stored with the topic by the metadata owner.
"""

from __future__ import annotations

from typing import Mapping

from pybroker.common.config import CONFIG_KEYS
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
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for, error_message_for
from pybroker.server.registry import api
from pybroker.server.topic_configs import CONFIG_TYPES, DEFAULT_CONFIG, STATIC_BROKER_CONFIG, DescribedConfig

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
        described = _describe(ctx, resource)
        if isinstance(described, tuple):
            result.error_code, result.error_message = described
        else:
            result.configs = [_entry(c, request.include_synonyms, request.include_documentation) for c in described]
        results.append(result)
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


def _describe(ctx: RequestContext, resource: DescribeConfigsRequest.DescribeConfigsResource
              ) -> list[DescribedConfig] | tuple[int, str]:
    broker = ctx.broker
    keys = resource.configuration_keys
    if resource.resource_type == TOPIC:
        info = broker.metadata.topic(resource.resource_name)
        if info is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {resource.resource_name} does not exist"
        return broker.topic_configs.describe(info.configs, keys)
    if resource.resource_type == BROKER:
        if resource.resource_name not in ("", str(broker.broker_id)):
            return ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {broker.broker_id}"
        return _broker_configs(ctx, keys)
    return ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource.resource_type}"


def _broker_configs(ctx: RequestContext, keys: list[str] | None) -> list[DescribedConfig]:
    config = ctx.broker.config
    described = []
    for key in CONFIG_KEYS.values():
        if keys is not None and key.name not in keys:
            continue
        value = config[key.name]
        if isinstance(value, list):
            text: str | None = ",".join(value)
        elif isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = None if value is None else str(value)
        source = STATIC_BROKER_CONFIG if config.is_set(key.name) else DEFAULT_CONFIG
        described.append(DescribedConfig(key.name, text, source, CONFIG_TYPES.get(key.type, 2), key.doc))
    return described


def _entry(config: DescribedConfig, include_synonyms: bool, include_documentation: bool) -> Entry:
    synonyms = []
    if include_synonyms:
        synonyms = [DescribeConfigsResponse.DescribeConfigsSynonym(name=config.name, value=config.value,
                                                                   source=config.source)]
    return Entry(name=config.name, value=config.value, read_only=False, is_default=config.is_default,
                 config_source=config.source, is_sensitive=False, synonyms=synonyms, config_type=config.config_type,
                 documentation=config.doc if include_documentation else None)


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
                items = [v for v in updated.get(op.name, "").split(",") if v]
                if op.config_operation == SET:
                    updated[op.name] = op.value
                elif op.config_operation == DELETE:
                    updated.pop(op.name, None)
                elif op.config_operation == APPEND:
                    updated[op.name] = ",".join(items + [v for v in (op.value or "").split(",") if v not in items])
                elif op.config_operation == SUBTRACT:
                    removed = set((op.value or "").split(","))
                    updated[op.name] = ",".join(v for v in items if v not in removed)
                else:
                    raise ValueError(f"Unknown config operation {op.config_operation}")
            return updated

        code, message = await _apply(ctx, resource.resource_type, resource.resource_name, edit,
                                     request.validate_only)
        responses.append(IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
            error_code=code, error_message=message, resource_type=resource.resource_type,
            resource_name=resource.resource_name))
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=responses)


async def _apply(ctx: RequestContext, resource_type: int, name: str, edit, validate_only: bool) -> tuple[int, str | None]:
    broker = ctx.broker
    if resource_type != TOPIC:
        return ErrorCode.INVALID_REQUEST, "Only topic configs can be altered; broker configs are static"
    info = broker.metadata.topic(name)
    if info is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist"
    try:
        updated = edit(info.configs)
        if validate_only:
            broker.validate_topic_configs(updated)
        else:
            await broker.metadata.alter_topic_configs(name, updated)
    except ValueError as exc:
        return ErrorCode.INVALID_CONFIG, str(exc)
    except Exception as exc:
        return error_code_for(exc), error_message_for(exc)
    return ErrorCode.NONE, None
