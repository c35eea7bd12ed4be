"""Errors that cross process boundaries.

A ``LoupeError`` carries a code (a SQLSTATE for SQL errors, a gRPC status name
otherwise), a message and, for SQL, the 1-based position in the statement.
"""

from __future__ import annotations

from dataclasses import dataclass

from loupe.proto.common.v1 import common_pb2


@dataclass
class LoupeError(Exception):
    code: str
    message: str
    detail: str = ""
    hint: str = ""
    position: int = 0

    def __str__(self) -> str:
        return self.message

    def to_proto(self) -> common_pb2.Error:
        return common_pb2.Error(
            code=self.code,
            message=self.message,
            detail=self.detail,
            hint=self.hint,
            position=self.position,
        )

    @classmethod
    def from_proto(cls, error: common_pb2.Error) -> LoupeError:
        return cls(error.code, error.message, error.detail, error.hint, error.position)


class SqlState:
    """The SQLSTATE codes Loupe returns (PostgreSQL's)."""

    SYNTAX_ERROR = "42601"
    UNDEFINED_OBJECT = "42704"
    UNDEFINED_TABLE = "42P01"
    UNDEFINED_COLUMN = "42703"
    AMBIGUOUS_COLUMN = "42702"
    GROUPING_ERROR = "42803"
    DUPLICATE_OBJECT = "42710"
    DEPENDENT_OBJECTS_STILL_EXIST = "2BP01"
    FEATURE_NOT_SUPPORTED = "0A000"
    INVALID_PARAMETER_VALUE = "22023"
    INSUFFICIENT_PRIVILEGE = "42501"
    INVALID_AUTHORIZATION = "28000"
    INVALID_PASSWORD = "28P01"
    INVALID_GRANT_OPERATION = "0LP01"
    RESERVED_NAME = "42939"
    QUERY_CANCELED = "57014"
    INTERNAL_ERROR = "XX000"
    INVALID_SESSION = "08003"
    DATA_EXCEPTION = "22000"
    DIVISION_BY_ZERO = "22012"
    CONNECTION_FAILURE = "08006"
    PROGRAM_LIMIT_EXCEEDED = "54000"
    OUT_OF_MEMORY = "53200"
    DATATYPE_MISMATCH = "42804"


# Codes services use among themselves (gRPC status names) and what a SQL client sees instead.
_CLIENT_CODES = {
    "UNAVAILABLE": "58000",  # system_error: another Loupe service did not answer
    "DEADLINE_EXCEEDED": "58000",
    "FAILED_PRECONDITION": "55000",  # object_not_in_prerequisite_state
    "INVALID_ARGUMENT": "22023",
    "NOT_FOUND": "42704",
}


def is_sqlstate(code: str) -> bool:
    """Whether ``code`` is a SQLSTATE: five digits or upper-case letters."""
    return len(code) == 5 and all(c.isdigit() or "A" <= c <= "Z" for c in code)


def client_error(error: LoupeError) -> LoupeError:
    """``error`` as a SQL client may see it: with a SQLSTATE, never a service status name."""
    if is_sqlstate(error.code):
        return error
    code = _CLIENT_CODES.get(error.code, SqlState.INTERNAL_ERROR)
    return LoupeError(code, error.message, error.detail, error.hint, error.position)


def internal_error(incident: str, service: str) -> LoupeError:
    """The XX000 a client sees for an unexpected failure; the service log has ``incident``."""
    return LoupeError(
        SqlState.INTERNAL_ERROR,
        f"internal error (incident {incident})",
        detail=f"The {service} log has the details under incident={incident}.",
    )
