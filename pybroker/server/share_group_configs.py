"""DescribeConfigs and (Incremental)AlterConfigs for GROUP config resources (type 32), called by the configs
handler: a share group's ``share.*`` keys (``coordinator/share/configs.py``), each described with its override
(source DYNAMIC_GROUP_CONFIG) or the broker's default; alterations checked as Kafka's GroupConfig.validate does.
Consumer-group keys (``consumer.*``) are not served: INVALID_CONFIG names them.
"""

from __future__ import annotations

from typing import Callable, Mapping

from pybroker.coordinator.share.configs import GroupConfigError
from pybroker.protocol.error_codes import ErrorCode
from pybroker.server.context import RequestContext
from pybroker.server.topic_configs import CONFIG_TYPES, DEFAULT_CONFIG, DescribedConfig

GROUP = 32
DYNAMIC_GROUP_CONFIG = 8

Edit = Callable[[Mapping[str, str]], dict[str, str]]


def describe(ctx: RequestContext, name: str, keys: list[str] | None) -> list[DescribedConfig] | tuple[int, str]:
    if not name:
        return ErrorCode.INVALID_REQUEST, "Group name must not be empty"
    configs = ctx.services.share.configs
    overrides = configs.overrides(name)
    return [DescribedConfig(key, overrides.get(key, default),
                            DYNAMIC_GROUP_CONFIG if key in overrides else DEFAULT_CONFIG,
                            CONFIG_TYPES["int" if key.endswith(".ms") else "string"], "")
            for key, default in sorted(configs.limits.defaults().items()) if not keys or key in keys]


async def apply(ctx: RequestContext, name: str, edit: Edit, validate_only: bool) -> tuple[int, str | None]:
    if not name:
        return ErrorCode.INVALID_REQUEST, "Group name must not be empty"
    configs = ctx.services.share.configs
    current = configs.overrides(name)
    try:
        updated = edit(current)
        changes: dict[str, str | None] = {key: None for key in current if key not in updated}
        changes.update({key: value for key, value in updated.items() if current.get(key) != value})
        for key, value in changes.items():
            configs.check(key, value)
    except (GroupConfigError, ValueError) as exc:
        return ErrorCode.INVALID_CONFIG, str(exc)
    if not validate_only:
        await configs.alter(name, changes)
    return ErrorCode.NONE, None
