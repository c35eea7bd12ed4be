"""The databases sqllogictest scripts run on: a live Loupe (gRPC) and PostgreSQL (psycopg)."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from loupe.client import SqlClient
from loupe.common.errors import LoupeError
from loupe.slt.runner import TargetError


class LoupeTarget:
    """A Loupe session through the SQL gRPC API."""

    name = "loupe"

    def __init__(self, host: str, port: int) -> None:
        self.client = SqlClient(host, port)
        self.client.open()

    def execute(self, sql: str) -> None:
        try:
            self.client.execute(sql)
        except LoupeError as error:
            raise TargetError(error.code, error.message) from None

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        try:
            return self.client.query(sql)
        except LoupeError as error:
            raise TargetError(error.code, error.message) from None

    def drop(self, kind: str, name: str) -> None:
        self.execute(f"DROP {kind} IF EXISTS {name} CASCADE")

    def close(self) -> None:
        self.client.close()


class PostgresTarget:
    """A schema of its own in a PostgreSQL database, dropped on ``close``."""

    name = "postgresql"

    def __init__(self, url: str) -> None:
        self.connection = psycopg.connect(url, autocommit=True)
        self.schema = f"slt_{uuid.uuid4().hex[:10]}"
        self.connection.execute(f"CREATE SCHEMA {self.schema}")
        self.connection.execute(f"SET search_path TO {self.schema}")

    def execute(self, sql: str) -> None:
        try:
            self.connection.execute(sql)
        except psycopg.Error as error:
            raise TargetError(error.sqlstate or "XX000", str(error).strip()) from None

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        try:
            cursor = self.connection.execute(sql)
            return cursor.fetchall() if cursor.description else []
        except psycopg.Error as error:
            raise TargetError(error.sqlstate or "XX000", str(error).strip()) from None

    def drop(self, kind: str, name: str) -> None:
        self.execute(f"DROP {kind} IF EXISTS {name} CASCADE")

    def close(self) -> None:
        try:
            self.connection.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        finally:
            self.connection.close()
