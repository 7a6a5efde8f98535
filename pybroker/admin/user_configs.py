"""`pybroker configs --entity-type users`: SCRAM credentials, as kafka-configs.sh manages them.

``--add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'`` (iterations default to
4096) sends AlterUserScramCredentials with a salted password; ``--delete-config SCRAM-SHA-256``
deletes one; ``--describe`` prints ``SCRAM credential configs for user-principal 'alice' are
SCRAM-SHA-256=iterations=8192`` per user (all users without ``--entity-name``), or Kafka's
``Error retrieving SCRAM credential configs for user-principal ...`` line. Quota configs, the
other user configs Kafka keeps, are in quota_configs.py, which calls these.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from pybroker.client.command_line import CommandError, UsageError
from pybroker.client import KafkaClient
from pybroker.client.scram_admin import (
    DEFAULT_ITERATIONS,
    ScramUpsertion,
    alter_user_scram_credentials,
    describe_user_scram_credentials,
)
from pybroker.security.sasl.scram import MECHANISMS

#: Kafka's exception class names for the refusals kafka-configs.sh prints
EXCEPTION_NAMES = {91: "ResourceNotFoundException", 92: "DuplicateResourceException",
                   93: "UnacceptableCredentialException", 33: "UnsupportedSaslMechanismException"}


def upsertions(user: str, updates: Mapping[str, str]) -> list[ScramUpsertion]:
    """``SCRAM-SHA-256`` -> ``iterations=N,password=P`` (brackets already stripped); UsageError otherwise."""
    result = []
    for key, value in updates.items():
        if key not in MECHANISMS:
            raise UsageError(f"Invalid config(s): {key} (users take only SCRAM credentials: "
                             f"{', '.join(MECHANISMS)})")
        fields = dict(item.split("=", 1) for item in value.split(",") if "=" in item)
        if "password" not in fields:
            raise UsageError(f"Invalid {key} value: use {key}=[iterations=8192,password=secret]")
        try:
            iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
        except ValueError:
            raise UsageError(f"Invalid {key} iterations: {fields['iterations']}") from None
        result.append(ScramUpsertion(user, key, fields["password"], iterations))
    return result


async def alter(client: KafkaClient, user: str, updates: Mapping[str, str], deletions: Sequence[str]) -> None:
    unknown = [k for k in deletions if k not in MECHANISMS]
    if unknown:
        raise UsageError(f"Invalid config(s): {','.join(unknown)}")
    results = await alter_user_scram_credentials(client, upsertions(user, updates), [(user, k) for k in deletions])
    error = results.get(user)
    if error is not None:
        raise CommandError(f"{EXCEPTION_NAMES.get(error.code, 'ApiException')}: {error}")
    print(f"Completed updating config for user {user}.")


async def describe(client: KafkaClient, user: str | None) -> None:
    results = await describe_user_scram_credentials(client, [user] if user is not None else None)
    for name, result in results.items():
        if isinstance(result, list):
            text = ", ".join(f"{mechanism}=iterations={iterations}" for mechanism, iterations in result)
            print(f"SCRAM credential configs for user-principal '{name}' are {text}")
        else:
            print(f"Error retrieving SCRAM credential configs for user-principal '{name}': "
                  f"{EXCEPTION_NAMES.get(result.code, 'ApiException')}: {result}")
