"""`pybroker configs --entity-type users|clients|ips`: client quotas, connection creation rate quotas
(ips, KIP-612) and SCRAM credentials, as kafka-configs.sh.

An entity is one or two entity types (``users``, ``clients``; both for a user's client) with a name
each, ``""`` naming the default entity (``--entity-default``, ``--user-defaults``). Quota keys go to
AlterClientQuotas, SCRAM mechanisms to AlterUserScramCredentials (user_configs.py); one command
alters one kind, as ConfigCommand insists. ``--describe`` prints ``Quota configs for user-principal
'alice', client-id 'app' are producer_byte_rate=1048576.0`` per entity matched strictly (Kafka's
``containsOnly`` filter), a name missing meaning every named entity of that type, then a user's SCRAM
lines when neither clients nor a default are involved.
"""

from __future__ import annotations

import socket
from decimal import Decimal
from typing import Mapping, Sequence

from pybroker.admin import user_configs
from pybroker.client.command_line import CommandError, UsageError
from pybroker.client import KafkaClient
from pybroker.client.quota_admin import ANY_SPECIFIED, DEFAULT_MATCH, alter_client_quotas, describe_client_quotas
from pybroker.common.client_quotas import CLIENT_ID, IP, IP_QUOTA_KEYS, QUOTA_KEYS, USER
from pybroker.security.sasl.scram import MECHANISMS

USERS = "users"
CLIENTS = "clients"
IPS = "ips"
#: kafka-configs.sh's entity types -> ClientQuotaEntity's
ENTITY_KINDS = {USERS: USER, CLIENTS: CLIENT_ID, IPS: IP}
LABELS = {USER: "user-principal", CLIENT_ID: "client-id", IP: "ip"}
#: Kafka's exception class names for AlterClientQuotas refusals
EXCEPTION_NAMES = {42: "InvalidRequestException", 31: "ClusterAuthorizationException",
                   35: "UnsupportedVersionException", 41: "NotControllerException"}


def java_double(value: float) -> str:
    """Java's Double.toString, which kafka-configs.sh prints quota values with (1048576.0, 1.048576E7)."""
    if value == 0.0:
        return "0.0"
    if 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    text = "".join(map(str, digits))
    mantissa = text[0] + "." + (text[1:] or "0")
    return f"{'-' if sign else ''}{mantissa}E{len(text) - 1 + int(exponent)}"


def components(types: Sequence[str], names: Sequence[str]) -> list[tuple[str, object]]:
    """Kafka's getAllClientQuotasConfigs filter: a name, the default (""), or any named entity (no name)."""
    if len(names) > len(types):
        raise UsageError("More entity names specified than entity types")
    result: list[tuple[str, object]] = []
    for index, entity_type in enumerate(types):
        kind = ENTITY_KINDS[entity_type]
        if index >= len(names):
            result.append((kind, ANY_SPECIFIED))
        else:
            result.append((kind, DEFAULT_MATCH if names[index] == "" else names[index]))
    return result


def resolvable(name: str) -> bool:
    """Kafka's isValidIpEntity: an IP address or a host that resolves."""
    try:
        socket.getaddrinfo(name, None)
    except (OSError, UnicodeError):
        return False
    return True


def entity_text(entity: Mapping[str, str | None]) -> str:
    parts = []
    for kind in (USER, CLIENT_ID, IP):
        if kind in entity:
            name = entity[kind]
            parts.append(f"{LABELS[kind]} '{name}'" if name is not None else f"the default {LABELS[kind]}")
    return ", ".join(parts)


async def describe(client: KafkaClient, types: Sequence[str], names: Sequence[str]) -> None:
    for entity, values in await describe_client_quotas(client, components(types, names), strict=True):
        text = ", ".join(f"{key}={java_double(value)}" for key, value in sorted(values.items()))
        print(f"Quota configs for {entity_text(entity)} are {text}")
    if types[0] == USERS and CLIENTS not in types and "" not in names:
        await user_configs.describe(client, names[0] if names else None)


async def alter(client: KafkaClient, types: Sequence[str], names: Sequence[str], updates: Mapping[str, str],
                deletions: Sequence[str]) -> None:
    """ConfigCommand's users/clients/ips branches: quota or SCRAM keys, checked the way it checks them."""
    quota_keys = [k for k in [*updates, *deletions] if k in QUOTA_KEYS]
    scram_added = [k for k in updates if k in MECHANISMS]
    scram_deleted = [k for k in deletions if k in MECHANISMS]
    unknown_added = [k for k in updates if k not in QUOTA_KEYS and k not in MECHANISMS]
    unknown_deleted = [k for k in deletions if k not in QUOTA_KEYS and k not in MECHANISMS]
    if types[0] == IPS:
        unknown = [k for k in [*updates, *deletions] if k not in IP_QUOTA_KEYS]
        if unknown:
            raise UsageError(f"Only connection quota configs can be added for '{IPS}' using --bootstrap-server. "
                             f"Unexpected config names: {','.join(unknown)}")
    elif types[0] == CLIENTS or len(types) == 2:
        if unknown_added or scram_added:
            raise UsageError(f"Only quota configs can be added for 'clients' using --bootstrap-server. "
                             f"Unexpected config names: {_scala_list(unknown_added + scram_added)}")
        if unknown_deleted or scram_deleted:
            raise UsageError(f"Only quota configs can be deleted for 'clients' using --bootstrap-server. "
                             f"Unexpected config names: {_scala_list(unknown_deleted + scram_deleted)}")
    else:
        if unknown_added:
            raise UsageError(f"Only quota and SCRAM credential configs can be added for 'users' using "
                             f"--bootstrap-server. Unexpected config names: {_scala_list(unknown_added)}")
        if unknown_deleted:
            raise UsageError(f"Only quota and SCRAM credential configs can be deleted for 'users' using "
                             f"--bootstrap-server. Unexpected config names: {_scala_list(unknown_deleted)}")
        if scram_added or scram_deleted:
            if "" in names:
                raise UsageError("The use of --entity-default or --user-defaults is not allowed with User SCRAM "
                                 "Credentials using --bootstrap-server.")
            if quota_keys:
                raise UsageError("Cannot alter both quota and SCRAM credential configs simultaneously for 'users' "
                                 "using --bootstrap-server.")
            await user_configs.alter(client, names[0], updates, deletions)
            return
    await alter_quotas(client, types, names, updates, deletions)
    if names[0]:
        print(f"Completed updating config for {types[0][:-1]} {names[0]}.")
    else:
        print(f"Completed updating default config for {types[0]} in the cluster.")


async def alter_quotas(client: KafkaClient, types: Sequence[str], names: Sequence[str], updates: Mapping[str, str],
                       deletions: Sequence[str]) -> None:
    if len(types) != len(names):
        raise UsageError("Exactly one entity name must be specified for every entity type")
    described = await describe_client_quotas(client, components(types, names), strict=True)
    current = described[0][1] if described else {}
    invalid = [k for k in deletions if k not in current]
    if invalid:
        raise CommandError(f"Invalid config(s): {','.join(invalid)}")
    ops: dict[str, float | None] = {}
    for key, text in updates.items():
        try:
            ops[key] = float(text)
        except ValueError:
            raise UsageError(f"Cannot parse quota configuration value for {key}: {text}") from None
    ops.update((key, None) for key in deletions)
    entity = {ENTITY_KINDS[t]: (n or None) for t, n in zip(types, names)}
    error = (await alter_client_quotas(client, [(entity, ops)]))[0]
    if error is not None:
        raise CommandError(f"{EXCEPTION_NAMES.get(error.code, 'ApiException')}: {error}")


def _scala_list(keys: Sequence[str]) -> str:
    """How Scala prints the key lists in ConfigCommand's messages."""
    return f"List({', '.join(keys)})"
