"""Load the `.sql` files under `sql/` and run them against DuckDB.

Each table has one file, `sql/<table>.sql`: a header comment that says what the table means, its
grain and its typed columns, then one query. The header is the table's contract: the runner wraps
the query so its result has exactly those columns, in that order, cast to those types, and
docs/schema.md is generated from the same headers. Queries take their parameters from DuckDB
session variables (`getvariable('run_id')`), set here through prepared statements, so no value
from a user is ever spliced into SQL text.

Header format:

    -- <table>: <one-line summary>
    --
    -- <paragraphs of explanation>
    --
    -- Grain: one row per ...
    -- Empty without: <table>[, <table> ...]     (optional)
    --
    -- Columns:
    --   <name> <TYPE>  <what it holds, with units>
    --       <continuation of the description>

`Empty without` names tables without whose rows the table has none (a Flight Recorder table in a
run without dumps): the runner then builds it empty, sparing the planning of a large query over
nothing, which is most of a small run's cost for such a table.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import duckdb

from pipelines.read import comm_kernels
from pipelines.warehouse.cache import kept, kept_bytes

SQL_DIR = Path(__file__).resolve().parents[2] / "sql"

_COLUMN = re.compile(r"^--   ([a-z_][a-z0-9_]*) (\S.*?)\s{2,}(\S.*)$")
_CONTINUATION = re.compile(r"^--\s{5,}(\S.*)$")


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    doc: str


@dataclass(frozen=True)
class TableSql:
    name: str
    summary: str
    explanation: str
    grain: str
    columns: tuple[Column, ...]
    query: str
    empty_without: tuple[str, ...] = ()

    def select(self) -> str:
        """The query wrapped to return exactly the documented columns and types."""
        casts = ",\n  ".join(f'CAST("{c.name}" AS {c.type}) AS "{c.name}"' for c in self.columns)
        return f"SELECT\n  {casts}\nFROM (\n{self.query}\n) AS _result"

    def select_from(self, relation: str) -> str:
        """The documented columns, cast, read from another relation instead of this file's query."""
        casts = ",\n  ".join(f'CAST("{c.name}" AS {c.type}) AS "{c.name}"' for c in self.columns)
        return f'SELECT\n  {casts}\nFROM "{relation}"'

    def empty(self) -> str:
        """A query returning no rows with the table's columns, for schema-only files."""
        casts = ", ".join(f'CAST(NULL AS {c.type}) AS "{c.name}"' for c in self.columns)
        return f"SELECT {casts} LIMIT 0"


@cache
def table(name: str) -> TableSql:
    """Parse `sql/<name>.sql`."""
    path = SQL_DIR / f"{name}.sql"
    return parse(name, path.read_text())


def parse(name: str, text: str) -> TableSql:
    lines = text.splitlines()
    header: list[str] = []
    body_start = 0
    for index, line in enumerate(lines):
        if not line.startswith("--"):
            body_start = index
            break
        header.append(line)
    first = header[0] if header else ""
    if not first.startswith(f"-- {name}: "):
        raise ValueError(f"sql/{name}.sql must start with '-- {name}: <summary>'")
    summary = first[len(f"-- {name}: ") :].strip()
    explanation: list[str] = []
    grain = ""
    empty_without: tuple[str, ...] = ()
    columns: list[Column] = []
    in_columns = False
    for line in header[1:]:
        if in_columns:
            match = _COLUMN.match(line)
            if match:
                columns.append(Column(*match.groups()))
                continue
            more = _CONTINUATION.match(line)
            if more and columns:
                last = columns[-1]
                columns[-1] = Column(last.name, last.type, f"{last.doc} {more.group(1)}")
                continue
            if line.strip("- "):
                raise ValueError(f"sql/{name}.sql: cannot read column line {line!r}")
            continue
        content = line[2:].strip()
        if content.startswith("Grain:"):
            grain = content[len("Grain:") :].strip()
        elif content.startswith("Empty without:"):
            empty_without = tuple(part.strip() for part in content[len("Empty without:") :].split(","))
        elif content == "Columns:":
            in_columns = True
        else:
            explanation.append(content)
    if not grain or not columns:
        raise ValueError(f"sql/{name}.sql needs a 'Grain:' line and a 'Columns:' block")
    query = "\n".join(lines[body_start:]).strip().rstrip(";")
    return TableSql(name, summary, _paragraphs(explanation), grain, tuple(columns), query, empty_without)


def _paragraphs(lines: list[str]) -> str:
    text = "\n".join(lines).strip()
    return re.sub(r"(?<!\n)\n(?!\n)", " ", text)


# This process's in-memory databases, one per configuration (see `session`).
_DATABASES: dict[tuple, duckdb.DuckDBPyConnection] = {}
_DATABASES_LOCK = threading.Lock()


def session(config: dict | None = None) -> duckdb.DuckDBPyConnection:
    """A new connection to this process's in-memory database of configuration `config`.

    Opening a database costs 20-40 ms and an ingest opens about ten sessions; a connection to an
    open one costs under a millisecond. A connection's variables and its temporary tables, views
    and registered objects are its own, so a session creates nothing but TEMP objects and sees no
    other session's; what it made goes when it is closed. The shared macros (sql/macros.sql) are
    the exception: the database defines them once for all its connections, as defining them takes
    20 ms and the analysis, roll-ups and report of an ingest each use them.
    """
    key = tuple(sorted((config or {}).items()))
    with _DATABASES_LOCK:
        if key not in _DATABASES:
            database = duckdb.connect(config=dict(key))
            database.execute(macros_text()).fetchall()
            _DATABASES[key] = database
        return _DATABASES[key].cursor()


class SharedSession:
    """Connections that build tables at once, each from its own thread, and read each other's.

    A session's TEMP objects are its connection's alone, so tables that several connections
    build and read go into a private in-memory database attached for the purpose, which each
    connection of this one uses by default, and which `close` detaches with all it holds; names
    not found there are looked up in the process's database, which holds the shared macros.
    Variables are each connection's own: `set_variables` gives them to every connection, which
    takes them before its next statement (`sync`).
    """

    def __init__(self, config: dict | None = None):
        self.config = config
        self.database = f"shared_{uuid.uuid4().hex}"
        self._variables: dict[str, Any] = {}
        self._given: dict[int, dict[str, Any]] = {}  # per connection, the variables it has
        self._connections: list[duckdb.DuckDBPyConnection] = []
        self._lock = threading.Lock()
        self._local = threading.local()
        self._owner = session(config)
        (home,) = self._owner.execute("SELECT current_database()").fetchone()
        self._search_path = f"{self.database}.main,{home}.main"
        self._owner.execute(f"ATTACH ':memory:' AS \"{self.database}\"").fetchall()

    def connect(self) -> duckdb.DuckDBPyConnection:
        """A new connection to the shared database, with every variable set so far."""
        con = session(self.config)
        con.execute(f'USE "{self.database}"').fetchall()
        con.execute(f"SET search_path = '{self._search_path}'").fetchall()
        with self._lock:
            self._connections.append(con)
            self._given[id(con)] = {}
        self.sync(con)
        return con

    def here(self) -> duckdb.DuckDBPyConnection:
        """The calling thread's connection (made on its first call), with every variable set so far."""
        if not hasattr(self._local, "con"):
            self._local.con = self.connect()
        self.sync(self._local.con)
        return self._local.con

    def set_variables(self, **values: Any) -> None:
        with self._lock:
            self._variables.update(values)

    def sync(self, con: duckdb.DuckDBPyConnection) -> None:
        """Give `con` the variables set since it last took them; call it from `con`'s own thread."""
        with self._lock:
            given = self._given[id(con)]
            changed = {name: value for name, value in self._variables.items() if name not in given or given[name] != value}
            given.update(changed)
        set_variables(con, **changed)

    def close(self) -> None:
        for con in self._connections:
            con.close()
        self._owner.execute(f'DETACH "{self.database}"').fetchall()
        self._owner.close()


def set_variables(con: duckdb.DuckDBPyConnection, **values: Any) -> None:
    """Set DuckDB session variables from Python values, as prepared parameters."""
    for name, value in values.items():
        if not name.isidentifier():
            raise ValueError(f"bad variable name {name!r}")
        con.execute(f"SET VARIABLE {name} = ?", [value]).fetchall()


def use_macros(con: duckdb.DuckDBPyConnection) -> None:
    """Give a session what the shared macros (interval arithmetic and friends, defined once per
    database by `session`) read."""
    set_variables(con, **macro_variables())


def macro_variables() -> dict[str, Any]:
    """What the macros read: the communication kernel families (`comm_kernel_match`), kept in
    pipelines/read/comm_kernels.py with the patterns settings.py builds from them."""
    return comm_kernels.session_variables()


def macros_text() -> str:
    """sql/macros.sql: the macros every session's database defines (see `session`)."""
    return (SQL_DIR / "macros.sql").read_text()


def lacks_inputs(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether a table that table `name` is empty without has no rows in this connection."""
    return any(not con.execute(f'SELECT EXISTS (FROM "{needed}")').fetchall()[0][0] for needed in table(name).empty_without)


def build_query(con: duckdb.DuckDBPyConnection, name: str) -> str:
    """The query that builds table `name` in this connection: its file's, or none at all when a
    table it is empty without has no rows."""
    return table(name).empty() if lacks_inputs(con, name) else table(name).select()


def materialize(con: duckdb.DuckDBPyConnection, name: str, temporary: bool = True,
                pieces: Sequence[tuple[int, int]] = ()) -> int:
    """Build table `name` from its file, in this connection (or its database: `temporary`
    False); return its row count. With `pieces`, ranges of ranks, it is built one range at a
    time, each range as the variables `piece_first_rank` and `piece_last_rank` (which its SQL
    reads through the macro `in_piece`), then set back to every rank."""
    created = "CREATE OR REPLACE TEMP TABLE" if temporary else "CREATE OR REPLACE TABLE"
    try:
        for position, piece in enumerate(pieces or [None]):
            if piece:
                set_variables(con, piece_first_rank=piece[0], piece_last_rank=piece[1])
            statement = f'INSERT INTO "{name}"' if position else f'{created} "{name}" AS'
            con.execute(f"{statement} {build_query(con, name)}").fetchall()
    except duckdb.Error as error:
        error.add_note(f"while building sql/{name}.sql")
        raise
    finally:
        if pieces:
            set_variables(con, piece_first_rank=None, piece_last_rank=None)
    return con.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0]


def materialize_from(con: duckdb.DuckDBPyConnection, name: str, relation: str) -> int:
    """Build table `name` from another relation of this connection, under `name`'s contract."""
    con.execute(f'CREATE OR REPLACE TEMP TABLE "{name}" AS {table(name).select_from(relation)}').fetchall()
    return con.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0]


def write_parquet(con: duckdb.DuckDBPyConnection, source: str, path: Path) -> int:
    """Write a table (or a parenthesised query) of this connection to a Parquet file; return its rows."""
    return con.execute(f"COPY {source} TO $path (FORMAT parquet, COMPRESSION zstd)", {"path": str(path)}).fetchall()[0][0]


def write_empty(name: str, path: Path) -> None:
    """Table `name` with no rows, as a Parquet file at `path`: a run without logs or dumps has a
    dozen such tables, and copying kept bytes costs a tenth of DuckDB writing each (0.14 ms
    against 1.3 ms), or of building its Arrow input first."""
    path.write_bytes(schema_only(name))


@cache
def schema_only(name: str) -> bytes:
    """The bytes of table `name`'s Parquet file of no rows, written once per schema and DuckDB
    version and kept in the cache folder."""
    wanted = table(name).empty()
    digest = hashlib.sha256(wanted.encode()).hexdigest()[:20]
    return kept_bytes(f"schema-{duckdb.__version__}-{digest}.parquet", lambda: _parquet_of(wanted))


def _parquet_of(query: str) -> bytes:
    con = session()
    try:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "table.parquet"
            write_parquet(con, f"({query})", path)
            return path.read_bytes()
    finally:
        con.close()


def relations(con: duckdb.DuckDBPyConnection, query: str) -> set[str]:
    """Every table or common table expression a query names, from its parse tree."""
    tree = json.loads(con.execute("SELECT json_serialize_sql($query)", {"query": query}).fetchall()[0][0])
    if tree.get("error"):
        raise ValueError(f"cannot parse: {tree.get('error_message')}")
    names, pending = set(), [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            if node.get("type") == "BASE_TABLE":
                names.add(node["table_name"])
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return names


def tables_named(queries: list[str], among: tuple[str, ...]) -> tuple[str, ...]:
    """The tables of `among` that any of `queries` names, in any case, for a session that makes
    views of those alone (each view reads its files' schemas when it is made); ValueError for a
    query that is not one statement DuckDB can serialise."""
    con = session()
    try:
        named = {name.lower() for query in queries for name in relations(con, query)}
    finally:
        con.close()
    return tuple(name for name in among if name in named)


def tables_read(queries: list[str], among: tuple[str, ...]) -> tuple[str, ...]:
    """tables_named for the project's own queries: parsing takes milliseconds a query, so the
    answer is kept, under a digest of the queries."""
    digest = hashlib.sha256(json.dumps([duckdb.__version__, queries, among]).encode()).hexdigest()[:20]
    return tuple(json.loads(kept(f"tables-read-{digest}.json", lambda: json.dumps(tables_named(queries, among)))))


@cache
def query_text(name: str) -> str:
    """The text of `sql/<name>.sql` for a query that is not a table (`report/headline`, `compare/parts`)."""
    return (SQL_DIR / f"{name}.sql").read_text()


def query_rows(con: duckdb.DuckDBPyConnection, name: str) -> list[dict]:
    """The rows of query `name` (query_text) in this session, as dicts."""
    relation = con.sql(query_text(name))
    columns = relation.columns
    return [dict(zip(columns, row, strict=True)) for row in relation.fetchall()]


def report_rows(con: duckdb.DuckDBPyConnection, name: str) -> list[dict]:
    """The rows of report query `name` (`sql/report/`): what a report's section or chart shows."""
    return query_rows(con, f"report/{name}")
