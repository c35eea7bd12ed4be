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
