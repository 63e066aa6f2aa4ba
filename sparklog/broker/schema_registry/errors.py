"""Confluent Schema Registry's errors: an HTTP status, an ``error_code`` and its message.

Invariants:
- Every refusal the registry answers is a ``RegistryError``; the REST layer turns it into
  Confluent's body ``{"error_code": N, "message": "..."}`` with the status ``N // 100`` for
  five-digit codes (40401 -> 404) and ``N`` itself for the three-digit ones (409).
- Messages are Confluent's wording, since clients and users match on them.
"""

from __future__ import annotations


class RegistryError(Exception):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message

    @property
    def status(self) -> int:
        return self.error_code // 100 if self.error_code >= 10000 else self.error_code

    @property
    def answer(self) -> tuple[int, dict[str, object]]:
        """(HTTP status, Confluent's error body)."""
        return self.status, {"error_code": self.error_code, "message": self.message}


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(40401, f"Subject '{subject}' not found.")


def version_not_found(version: object) -> RegistryError:
    return RegistryError(40402, f"Version {version} not found.")


def schema_not_found(schema_id: object = None) -> RegistryError:
    text = "Schema not found" if schema_id is None else f"Schema {schema_id} not found"
    return RegistryError(40403, text)


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(40404, f"Subject '{subject}' was soft deleted.Set permanent=true "
                                "to delete permanently")


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(40405, f"Subject '{subject}' was not deleted first before being "
                                "permanently deleted")


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(40406, f"Subject '{subject}' Version {version} was soft deleted.Set "
                                "permanent=true to delete permanently")


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(40407, f"Subject '{subject}' Version {version} was not deleted "
                                "first before being permanently deleted")


def subject_config_not_found(subject: str) -> RegistryError:
    return RegistryError(40408, f"Subject '{subject}' does not have subject-level "
                                "compatibility configured")


def subject_mode_not_found(subject: str) -> RegistryError:
    return RegistryError(40409, f"Subject '{subject}' does not have subject-level mode "
                                "configured")


def incompatible(subject: str, messages: list[str]) -> RegistryError:
    return RegistryError(409, f"Schema being registered is incompatible with an earlier "
                              f"schema for subject \"{subject}\", details: "
                              f"[{', '.join(messages)}]")


def invalid_schema(detail: str) -> RegistryError:
    return RegistryError(42201, f"Invalid schema {detail}")


def invalid_version(version: object) -> RegistryError:
    return RegistryError(42202, f"The specified version '{version}' is not a valid version "
                                "id. Allowed values are between [1, 2^31-1] and the string "
                                "\"latest\"")


def invalid_compatibility_level(level: object) -> RegistryError:
    return RegistryError(42203, f"Invalid compatibility level {level}. Valid values are none, "
                                "backward, forward, full, backward_transitive, "
                                "forward_transitive, and full_transitive")


def invalid_mode(mode: object) -> RegistryError:
    return RegistryError(42204, f"Invalid mode {mode}. Valid values are READWRITE, READONLY "
                                "and IMPORT")


def operation_not_permitted(detail: str) -> RegistryError:
    return RegistryError(42205, detail)


def references_exist(subject: str, version: int) -> RegistryError:
    return RegistryError(42206, f"One or more references exist to the schema "
                                f"{{magic=1,keytype=SCHEMA,subject={subject},version={version}}}.")


def store_error(detail: str) -> RegistryError:
    return RegistryError(50001, f"Error in the backend data store - {detail}")


def timeout_error() -> RegistryError:
    return RegistryError(50002, "Operation timed out")
