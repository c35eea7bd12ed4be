"""``loupe sql``: run SQL against a coordinator — ``-c STATEMENTS``, a REPL, or stdin.

Output: aligned tables for people (``--format table``, psql-like), or one JSON
array of objects (``--format json``) or CSV with a header (``--format csv``)
per row-returning statement for scripts. Errors go to stderr as
``ERROR:  message``, the statement line with a caret under the error's
position, and ``CODE: <sqlstate>``. Exit status: 0 ok, 1 SQL error, 2 the
server cannot be reached.

SUBSCRIBE's rows are printed as they arrive (tab-separated after a header
line, or one JSON object / CSV line per row) until Ctrl-C. While CREATE INDEX
or CREATE MATERIALIZED VIEW hydrates its dataflow, progress goes to stderr:
on a terminal, one line per object rewritten in place with a bar, the share
of the estimated records done and the ETA; otherwise one plain line per
change. No colours and no escape sequences but a carriage return (the line
is padded over its previous text), so dumb terminals show it too.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as dt
import getpass
import io
import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from loupe import sqltypes
from loupe.client import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    ConnectionFailed,
    HydrationProgress,
    ServerNotice,
    SqlClient,
    StatementResult,
    StreamedRows,
)
from loupe.common.errors import LoupeError
from loupe.common.jsonb import text as jsonb_text
from loupe.interval import Interval, format_interval

EXIT_OK, EXIT_SQL_ERROR, EXIT_UNREACHABLE = 0, 1, 2
# SQLSTATE of a request naming a session the coordinator does not have.
SESSION_GONE = "08003"
NUMERIC_TYPES = frozenset(t.name for t in sqltypes.TYPES.values() if t.category == sqltypes.NUMERIC)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host",
        default=os.environ.get("LOUPE_SQL_HOST", DEFAULT_HOST),
        help=f"coordinator address (LOUPE_SQL_HOST, default {DEFAULT_HOST})",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("LOUPE_SQL_PORT", DEFAULT_PORT)),
        help=f"coordinator SQL port (LOUPE_SQL_PORT, default {DEFAULT_PORT})",
    )
    parser.add_argument(
        "-U", "--user", default=os.environ.get("LOUPE_USER", ""), help="user (default materialize)"
    )
    parser.add_argument(
        "-W",
        "--password-prompt",
        action="store_true",
        help="ask for the password (else LOUPE_PASSWORD, else none)",
    )
    # dest is not "command": the `loupe` parser keeps the subcommand there.
    parser.add_argument("-c", "--command", dest="statements", help="run these statements and exit")
    parser.add_argument(
        "--format", choices=["table", "json", "csv"], default="table", help="output format"
    )


def run(args: argparse.Namespace) -> int:
    password = os.environ.get("LOUPE_PASSWORD", "")
    if args.password_prompt:
        password = getpass.getpass(f"Password for user {args.user or 'materialize'}: ")
    client = SqlClient(args.host, args.port, user=args.user, password=password)
    try:
        client.open()
    except ConnectionFailed as error:
        print(f"loupe sql: {error}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except LoupeError as error:
        print_error(error, "", sys.stderr)
        return EXIT_SQL_ERROR
    output = Output(args.format, sys.stdout, sys.stderr)
    try:
        if args.statements is not None:
            return run_statements(client, args.statements, output)
        if not sys.stdin.isatty():
            return run_statements(client, sys.stdin.read(), output)
        return Repl(client, output).loop()
    finally:
        client.close()


def run_statements(client: SqlClient, sql: str, output: Output, *, reopen: bool = False) -> int:
    """Run ``sql``, print results as they complete; returns the exit status.

    ``reopen`` (the REPL): a session the coordinator closed (idle too long, or a
    restarted coordinator) is opened again, and the statement, which never ran,
    is run in the new session, after saying that its settings are the defaults.
    """
    try:
        for item in client.stream(sql):
            output.show(item)
    except ConnectionFailed as error:
        print(f"loupe sql: {error}", file=output.errors)
        return EXIT_UNREACHABLE
    except LoupeError as error:
        output.flush()
        if reopen and error.code == SESSION_GONE:
            client.close()
            try:
                client.open()
            except (ConnectionFailed, LoupeError) as failure:
                print(f"loupe sql: could not open a new session: {failure}", file=output.errors)
                return EXIT_UNREACHABLE
            print(
                "loupe sql: the session was closed by the server (idle too long?); "
                "a new one was opened, with default settings",
                file=output.errors,
            )
            return run_statements(client, sql, output)
        print_error(error, sql, output.errors)
        return EXIT_SQL_ERROR
    except KeyboardInterrupt:
        print("canceled", file=output.errors)
        return EXIT_SQL_ERROR
    return EXIT_OK


class Output:
    """Prints results in one format."""

    def __init__(self, format: str, out: TextIO, errors: TextIO) -> None:
        self.format = format
        self.out = out
        self.errors = errors
        # Whether the header of the streaming statement running now was printed.
        self._streaming_header = False
        # Whether a progress line waits for its end (terminals only), for which
        # object, and how long it is (a rewrite pads over what it replaces).
        self._progress_open = False
        self._progress_object = ""
        self._progress_width = 0

    def show(self, item: StatementResult | ServerNotice | StreamedRows | HydrationProgress) -> None:
        if isinstance(item, HydrationProgress):
            self.progress(item)
            return
        self._end_progress()
        if isinstance(item, ServerNotice):
            print(f"{item.severity}:  {item.message}", file=self.errors)
            return
        if isinstance(item, StreamedRows):
            self.streamed(item)
            return
        self._streaming_header = False
        if self.format == "json":
            if item.columns is not None:
                self.out.write(render_json(item) + "\n")
        elif self.format == "csv":
            if item.columns is not None:
                self.out.write(render_csv(item))
        else:
            self.out.write(render_table(item) if item.columns is not None else item.tag + "\n")
        self.out.flush()

    def flush(self) -> None:
        self._end_progress()
        self.out.flush()

    def streamed(self, item: StreamedRows) -> None:
        """Rows of a SUBSCRIBE, printed at once: a header first (table and csv formats)."""
        names = [name for name, _ in item.columns]
        if self.format == "json":
            for row in item.rows:
                values = {n: _json_value(v) for n, v in zip(names, row, strict=True)}
                self.out.write(json.dumps(values, ensure_ascii=False) + "\n")
        elif self.format == "csv":
            writer = csv.writer(self.out, lineterminator="\n")
            if not self._streaming_header:
                writer.writerow(names)
            writer.writerows([format_value(v) for v in row] for row in item.rows)
        else:
            if not self._streaming_header:
                self.out.write("\t".join(names) + "\n")
            for row in item.rows:
                self.out.write("\t".join(format_value(v) for v in row) + "\n")
        self._streaming_header = True
        self.out.flush()

    def progress(self, item: HydrationProgress) -> None:
        """Progress on stderr: a bar rewritten in place on a terminal, plain lines otherwise."""
        if not self.errors.isatty():
            self.errors.write(progress_line(item) + "\n")
            self.errors.flush()
            return
        if self._progress_open and item.object != self._progress_object:
            self._end_progress()
        width = shutil.get_terminal_size((80, 24)).columns
        # One column short of the width: a full line would wrap on some terminals.
        text = progress_bar_line(item)[: max(width - 1, 20)]
        self.errors.write("\r" + text.ljust(self._progress_width))
        self._progress_open = True
        self._progress_object = item.object
        self._progress_width = len(text)
        if item.hydrated:
            self._end_progress()
        self.errors.flush()

    def _end_progress(self) -> None:
        if self._progress_open:
            self.errors.write("\n")
            self.errors.flush()
            self._progress_open = False
            self._progress_width = 0


# -- progress ------------------------------------------------------------------------------

BAR_WIDTH = 24


def format_eta(ms: int) -> str:
    """``12s``, ``3m05s``, ``1h02m``: the time left, to the second (rounded up)."""
    seconds = -(-ms // 1000)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"


def progress_fraction(item: HydrationProgress) -> float | None:
    """How much of the work is done: of the estimated records, else of the nodes (tables).

    Below 1 until hydrated (an estimate can be passed before the end).
    """
    if item.hydrated:
        return 1.0
    if item.records_estimated:
        done = item.records_done / item.records_estimated
    elif item.nodes_total:
        done = item.nodes_hydrated / item.nodes_total
    else:
        return None
    return min(done, 0.99)


def _state(item: HydrationProgress) -> str:
    if item.unit == "tables":
        return "loaded" if item.hydrated else "loading"
    return "hydrated" if item.hydrated else "hydrating"


def progress_line(item: HydrationProgress) -> str:
    """A plain progress line: ``hydrating <object>: 3/7 nodes, 1,200/4,000 records (30%), ETA 12s``.

    Without an estimate of the records: ``…: 3/7 nodes, 1,500 records read``; a load
    generator: ``loading <object>: 3/8 tables, 61,234 rows written``.
    """
    head = f"{_state(item)} {item.object}: {item.nodes_hydrated}/{item.nodes_total} {item.unit}"
    if item.unit == "tables":
        return f"{head}, {item.records_read:,} rows written"
    if not item.records_estimated:
        return f"{head}, {item.records_read:,} records read"
    fraction = progress_fraction(item) or 0.0
    text = (
        f"{head}, {item.records_done:,}/{item.records_estimated:,} records ({int(fraction * 100)}%)"
    )
    if not item.hydrated and item.eta_ms is not None:
        text += f", ETA {format_eta(item.eta_ms)}"
    return text


def progress_bar_line(item: HydrationProgress) -> str:
    """A terminal's progress line: ``hydrating <object> [#####-----]  42% 3/7 nodes,
    1,200/4,000 records, ETA 12s`` (``ETA ?`` until there is a rate)."""
    fraction = progress_fraction(item)
    if fraction is None:
        return progress_line(item)
    filled = int(fraction * BAR_WIDTH)
    bar = "#" * filled + "-" * (BAR_WIDTH - filled)
    text = (
        f"{_state(item)} {item.object} [{bar}] {int(fraction * 100):>3}%"
        f" {item.nodes_hydrated}/{item.nodes_total} {item.unit}"
    )
    if item.unit == "tables":
        return f"{text}, {item.records_read:,} rows written"
    if item.records_estimated:
        text += f", {item.records_done:,}/{item.records_estimated:,} records"
    else:
        text += f", {item.records_read:,} records read"
    if not item.hydrated:
        text += f", ETA {format_eta(item.eta_ms)}" if item.eta_ms is not None else ", ETA ?"
    return text


# -- rendering -----------------------------------------------------------------------------


def format_value(value: Any) -> str:
    """A value as psql shows it (NULL is empty, booleans are t/f)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, dt.datetime):
        text = value.isoformat(sep=" ")
        return text.removesuffix(":00") if value.utcoffset() is not None else text
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if isinstance(value, list):  # an array or list, quoted as PostgreSQL prints one
        return (
            "{" + ",".join("NULL" if v is None else _element(format_value(v)) for v in value) + "}"
        )
    if isinstance(value, dict):
        return jsonb_text(value)  # as PostgreSQL prints jsonb
    if isinstance(value, Interval):
        return format_interval(value)
    return str(value)


def _element(text: str) -> str:
    if text and text.upper() != "NULL" and not any(c in '{},"\\' or c.isspace() for c in text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_table(result: StatementResult) -> str:
    """psql's aligned format: centred header, numbers right-aligned, ``(N rows)``."""
    columns = result.columns or []
    names = [name for name, _ in columns]
    cells = [[format_value(v) for v in row] for row in result.rows]
    widths = [max([len(name), *(len(row[i]) for row in cells)]) for i, name in enumerate(names)]
    right = [kind in NUMERIC_TYPES for _, kind in columns]

    def line(parts: Sequence[str]) -> str:
        return "|".join(f" {part} " for part in parts).rstrip()

    lines = [
        line([_center(name, width) for name, width in zip(names, widths, strict=True)]),
        "+".join("-" * (width + 2) for width in widths),
    ]
    for row in cells:
        lines.append(
            line(
                [
                    cell.rjust(width) if is_right else cell.ljust(width)
                    for cell, width, is_right in zip(row, widths, right, strict=True)
                ]
            )
        )
    count = len(result.rows)
    lines.append(f"({count} row{'' if count == 1 else 's'})")
    return "\n".join(lines) + "\n\n"


def _center(text: str, width: int) -> str:
    # psql puts the odd space on the right; str.center does not always.
    left = (width - len(text)) // 2
    return (" " * left + text).ljust(width)


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str | dict):
        return value
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if isinstance(value, Interval):
        return format_interval(value)
    return str(value)


def render_json(result: StatementResult) -> str:
    """One JSON array of objects (column name -> value)."""
    names = result.column_names
    objects = [
        {name: _json_value(value) for name, value in zip(names, row, strict=True)}
        for row in result.rows
    ]
    return json.dumps(objects, ensure_ascii=False)


def render_csv(result: StatementResult) -> str:
    """A header line and one line per row (NULL is empty)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(result.column_names)
    for row in result.rows:
        writer.writerow([format_value(v) for v in row])
    return buffer.getvalue()


def render_error(error: LoupeError, sql: str, *, color: bool = False) -> str:
    """``ERROR:  message``, the line of ``sql`` at the position with a caret, details, code."""
    label = "\x1b[1;31mERROR\x1b[0m" if color else "ERROR"
    lines = [f"{label}:  {error.message}"]
    if error.position > 0 and sql:
        index = min(error.position - 1, len(sql))
        line_start = sql.rfind("\n", 0, index) + 1
        line_end = sql.find("\n", index)
        text = sql[line_start : line_end if line_end >= 0 else len(sql)]
        number = sql.count("\n", 0, line_start) + 1
        prefix = f"LINE {number}: "
        lines.append(prefix + text.replace("\t", " "))
        lines.append(" " * (len(prefix) + index - line_start) + "^")
    if error.detail:
        lines.append(f"DETAIL:  {error.detail}")
    if error.hint:
        lines.append(f"HINT:  {error.hint}")
    lines.append(f"CODE: {error.code}")
    return "\n".join(lines) + "\n"


def _color(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ


def print_error(error: LoupeError, sql: str, stream: TextIO) -> None:
    stream.write(render_error(error, sql, color=_color(stream)))
    stream.flush()


# -- the REPL ------------------------------------------------------------------------------


def statement_complete(buffer: str) -> bool:
    """Whether ``buffer`` ends with a ``;`` outside quotes and comments."""
    state = ""  # "", "'", '"', "--", "/*", or a dollar-quote tag
    last_significant = ""
    index = 0
    while index < len(buffer):
        char = buffer[index]
        rest = buffer[index:]
        if state in ("'", '"'):
            if char == state:
                if rest[1:2] == state:
                    index += 1  # doubled quote
                else:
                    state = ""
        elif state == "--":
            if char == "\n":
                state = ""
        elif state == "/*":
            if rest.startswith("*/"):
                state = ""
                index += 1
        elif state.startswith("$"):
            if rest.startswith(state):
                index += len(state) - 1
                state = ""
        elif rest.startswith("--"):
            state = "--"
        elif rest.startswith("/*"):
            state = "/*"
            index += 1
        elif char in ("'", '"'):
            state = char
            last_significant = char
        elif char == "$":
            end = buffer.find("$", index + 1)
            tag = buffer[index : end + 1] if end >= 0 else ""
            if tag and (tag == "$$" or tag[1:-1].isidentifier()):
                state = tag
                index = end
            last_significant = char
        elif not char.isspace():
            last_significant = char
        index += 1
    return state in ("", "--") and last_significant == ";"


# psql's describe commands, as the SHOW statements they stand for.
_DESCRIBE = {
    "\\d": "SHOW OBJECTS",
    "\\dt": "SHOW TABLES",
    "\\dv": "SHOW VIEWS",
    "\\dm": "SHOW MATERIALIZED VIEWS",
    "\\di": "SHOW INDEXES",
    "\\dn": "SHOW SCHEMAS",
    "\\l": "SHOW DATABASES",
}


def describe_command(line: str) -> str | None:
    """The statement a psql-style ``\\d``-command stands for (None if it is none)."""
    command, _, argument = line.partition(" ")
    argument = argument.strip()
    if command == "\\d" and argument:
        return f"SHOW COLUMNS FROM {argument}"
    if command == "\\di" and argument:
        return f"SHOW INDEXES ON {argument}"
    return _DESCRIBE.get(command)


class Repl:
    """A psql-like prompt: statements end at ``;``, ``\\q`` quits, history is kept."""

    HELP = (
        "\\q quit · \\? this help · \\d list relations · \\d NAME its columns"
        " · \\dt tables · \\dv views · \\di indexes · \\dn schemas · \\l databases"
        " · statements end with ;"
    )

    def __init__(self, client: SqlClient, output: Output) -> None:
        self.client = client
        self.output = output
        self.name = client.user or client.parameters.get("user", "") or "materialize"
        self.history = Path(os.environ.get("LOUPE_SQL_HISTORY", Path.home() / ".loupe_sql_history"))

    def loop(self) -> int:
        readline = self._setup_readline()
        print(f"loupe sql: connected to {self.client.address}. {self.HELP}")
        buffer = ""
        status = EXIT_OK
        try:
            while True:
                prompt = f"{self.name}=> " if not buffer else f"{self.name}-> "
                try:
                    line = input(prompt)
                except EOFError:
                    print()
                    return status
                except KeyboardInterrupt:
                    print()
                    buffer = ""
                    continue
                if not buffer and line.strip() in ("\\q", "quit", "exit"):
                    return status
                if not buffer and line.strip() == "\\?":
                    print(self.HELP)
                    continue
                if not buffer and line.strip().startswith("\\"):
                    described = describe_command(line.strip())
                    if described is None:
                        print(f"unknown command {line.strip().split()[0]}; \\? lists them")
                    else:
                        run_statements(self.client, described, self.output, reopen=True)
                    continue
                buffer = f"{buffer}\n{line}" if buffer else line
                if not buffer.strip():
                    buffer = ""
                    continue
                if statement_complete(buffer):
                    result = run_statements(self.client, buffer, self.output, reopen=True)
                    if result == EXIT_UNREACHABLE:
                        status = result
                    buffer = ""
        finally:
            if readline is not None:
                with contextlib.suppress(OSError):
                    readline.write_history_file(self.history)

    def _setup_readline(self) -> Any:
        try:
            import readline
        except ImportError:  # pragma: no cover - platforms without readline
            return None
        with contextlib.suppress(OSError):
            readline.read_history_file(self.history)
        readline.set_history_length(1000)
        return readline
