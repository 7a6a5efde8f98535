"""Confluent Schema Registry's errors: an HTTP status, a registry error code and its message.

Clients branch on ``error_code`` (confluent-kafka's SchemaRegistryError, Java's RestClientException), so
the codes and message texts follow Confluent's ``Errors`` class.
"""

from __future__ import annotations

SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
SCHEMAVERSION_SOFT_DELETED = 40406
SCHEMAVERSION_NOT_SOFT_DELETED = 40407
SUBJECT_COMPATIBILITY_NOT_CONFIGURED = 40408
SUBJECT_MODE_NOT_CONFIGURED = 40409
INCOMPATIBLE_SCHEMA = 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_MODE = 42204
OPERATION_NOT_PERMITTED = 42205
REFERENCE_EXISTS = 42206
ID_DOES_NOT_MATCH = 42207
INVALID_SUBJECT = 42208
SCHEMA_TOO_LARGE = 42209
STORE_ERROR = 50001
OPERATION_TIMEOUT = 50002
REQUEST_FORWARDING_FAILED = 50003
UNKNOWN_LEADER = 50004


class RegistryError(Exception):
    """An error answered as ``{"error_code": ..., "message": ...}`` with ``status``."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message

    def body(self) -> dict[str, object]:
        return {"error_code": self.error_code, "message": self.message}


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def version_not_found(version: object) -> RegistryError:
    return RegistryError(404, VERSION_NOT_FOUND, f"Version {version} not found.")


def schema_not_found(schema_id: int | None = None) -> RegistryError:
    return RegistryError(404, SCHEMA_NOT_FOUND, "Schema not found" if schema_id is None else f"Schema {schema_id} not found")


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, SUBJECT_SOFT_DELETED,
                         f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently")


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, SUBJECT_NOT_SOFT_DELETED,
                         f"Subject '{subject}' was not deleted first before being permanently deleted")


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(404, SCHEMAVERSION_SOFT_DELETED,
                         f"Subject '{subject}' Version {version} was soft deleted.Set permanent=true to delete permanently")


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(404, SCHEMAVERSION_NOT_SOFT_DELETED,
                         f"Subject '{subject}' Version {version} was not deleted first before being permanently deleted")


def compatibility_not_configured(subject: str) -> RegistryError:
    return RegistryError(404, SUBJECT_COMPATIBILITY_NOT_CONFIGURED,
                         f"Subject '{subject}' does not have subject-level compatibility configured")


def mode_not_configured(subject: str) -> RegistryError:
    return RegistryError(404, SUBJECT_MODE_NOT_CONFIGURED,
                         f"Subject '{subject}' does not have subject-level mode configured")


def incompatible(subject: str, details: list[str]) -> RegistryError:
    return RegistryError(409, INCOMPATIBLE_SCHEMA,
                         f"Schema being registered is incompatible with an earlier schema for subject \"{subject}\", "
                         f"details: [{', '.join(details)}]")


def invalid_schema(reason: str) -> RegistryError:
    return RegistryError(422, INVALID_SCHEMA, f"Invalid schema {reason}" if reason else "Invalid schema")


def invalid_version(version: str) -> RegistryError:
    return RegistryError(422, INVALID_VERSION,
                         f"The specified version '{version}' is not a valid version id. Allowed values are between "
                         "[1, 2^31-1] and the string \"latest\"")


def invalid_compatibility_level() -> RegistryError:
    return RegistryError(422, INVALID_COMPATIBILITY_LEVEL,
                         "Invalid compatibility level. Valid values are none, backward, forward, full, "
                         "backward_transitive, forward_transitive, and full_transitive")


def invalid_mode(mode: str) -> RegistryError:
    return RegistryError(422, INVALID_MODE,
                         f"Invalid mode {mode}. Valid values are READWRITE, READONLY, READONLY_OVERRIDE, IMPORT")


def not_permitted(message: str) -> RegistryError:
    return RegistryError(422, OPERATION_NOT_PERMITTED, message)


def reference_exists(message: str) -> RegistryError:
    return RegistryError(422, REFERENCE_EXISTS, message)


def id_does_not_match(message: str) -> RegistryError:
    return RegistryError(422, ID_DOES_NOT_MATCH, message)


def invalid_subject(subject: str) -> RegistryError:
    return RegistryError(422, INVALID_SUBJECT, f"The specified subject '{subject}' is not a valid.")


def schema_too_large(size: int, limit: int) -> RegistryError:
    return RegistryError(422, SCHEMA_TOO_LARGE, f"Schema of {size} bytes is larger than the {limit} bytes allowed")


def store_error(message: str) -> RegistryError:
    return RegistryError(500, STORE_ERROR, message)


def operation_timeout(message: str) -> RegistryError:
    return RegistryError(500, OPERATION_TIMEOUT, message)


def forwarding_failed(message: str) -> RegistryError:
    return RegistryError(500, REQUEST_FORWARDING_FAILED, message)


def unknown_leader(message: str) -> RegistryError:
    return RegistryError(500, UNKNOWN_LEADER, message)


def bad_request(message: str, status: int = 400) -> RegistryError:
    """Malformed HTTP or JSON: Confluent answers these with the HTTP status as the error code."""
    return RegistryError(status, status, message)
