"""DescribeConfigs and (Incremental)AlterConfigs for client-metrics resources (ConfigResource type 16),
called by the configs handler: the subscription's own keys only (Kafka's ConfigHelper lists the set keys
with source DYNAMIC_CLIENT_METRICS_CONFIG, no defaults, no synonyms); alterations validated as Kafka's
ClientMetricsConfigs.validate does, an emptied config removing the subscription.
"""

from __future__ import annotations

from typing import Callable, Mapping

from pybroker.common.client_metrics import INTERVAL_MS, InvalidSubscription, validate
from pybroker.protocol.error_codes import ErrorCode
from pybroker.server.context import RequestContext
from pybroker.server.topic_configs import CONFIG_TYPES, DescribedConfig

CLIENT_METRICS = 16
DYNAMIC_CLIENT_METRICS_CONFIG = 7

Edit = Callable[[Mapping[str, str]], dict[str, str]]


def describe(ctx: RequestContext, name: str, keys: list[str] | None) -> list[DescribedConfig] | tuple[int, str]:
    if not name:
        return ErrorCode.INVALID_REQUEST, "Client metrics subscription name must not be empty"
    config = ctx.services.client_metrics.store.all().get(name, {})
    return [DescribedConfig(key, value, DYNAMIC_CLIENT_METRICS_CONFIG,
                            CONFIG_TYPES["int" if key == INTERVAL_MS else "list"], "")
            for key, value in sorted(config.items()) if not keys or key in keys]


async def apply(ctx: RequestContext, name: str, edit: Edit, validate_only: bool) -> tuple[int, str | None]:
    store = ctx.services.client_metrics.store
    try:
        updated = edit(store.all().get(name, {}))
        validate(name, updated)
    except InvalidSubscription as exc:
        return (ErrorCode.INVALID_CONFIG if exc.invalid_config else ErrorCode.INVALID_REQUEST), str(exc)
    except ValueError as exc:
        return ErrorCode.INVALID_CONFIG, str(exc)
    if not validate_only:
        await store.set_config(name, updated)
    return ErrorCode.NONE, None
