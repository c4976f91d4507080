"""Walk a trace event by event with a real JSON decoder: the careful path.

The fast path (`splitter`) hands whole chunks to DuckDB and fails a file as a whole when any byte
of it is off. This path is slower, since Python touches every event, but it keeps everything that
can be kept: events of any layout, with invalid UTF-8 (replaced), with values of the wrong type
(coerced or the event skipped), garbage between events (skipped up to the next event), and a
file cut anywhere. Every skip becomes a `ParseIssue` naming the file and line.

It writes sanitised events as NDJSON chunk files whose every value has the type the normaliser
declares, so DuckDB reading them cannot fail.
"""

from __future__ import annotations

import codecs
import decimal
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from collections.abc import Iterator

import orjson

from pipelines.read.issues import ParseIssue
from pipelines.read.kineto.splitter import DEFAULT_CHUNK_BYTES, NotATrace, _Reader, open_trace

# A value still incomplete after this many characters is not going to complete.
MAX_VALUE_CHARS = 64 << 20
# What lies between values, skipped by the regex engine: gigabytes of whitespace in a file cost
# seconds, not the minutes a loop over characters takes.
_SKIP = {chars: re.compile(f"[{chars}]*") for chars in (" \t\r\n", " \t\r\n,")}


@dataclass
class ExactTrace:
    """Events recovered one by one, as NDJSON chunk files, plus what was skipped."""

    path: Path
    meta: dict
    chunk_paths: list[Path]
    events_kept: int
    input_bytes: int
    truncated: bool = False
    issues: list[ParseIssue] = field(default_factory=list)


class _Cut(Exception):
    """The document ends before the value being read does."""


def exact_trace(
    path: Path, out_dir: Path, arg_keys: frozenset[str], chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> ExactTrace:
    """Decode `path` event by event, keeping only `arg_keys` of each event's args."""
    out_dir.mkdir(parents=True, exist_ok=True)
    issues: list[ParseIssue] = []
    writer = _LineWriter(out_dir, chunk_bytes)
    meta: dict = {}
    truncated = False
    decoder = json.JSONDecoder(parse_float=decimal.Decimal)
    with open_trace(path) as raw:
        text = _Text(raw, str(path), issues)
        try:
            for key, value in text.top_level(decoder):
                if key != "traceEvents":
                    meta[key] = _plain(value)
                    continue
                for event, line in value:
                    row = _sanitise(event, arg_keys, str(path), line, issues)
                    if row is not None:
                        writer.write(row)
        except _Cut as cut:
            truncated = True
            issues.append(ParseIssue(str(path), text.line_number(), None, "error", f"the trace is cut off: {cut}"))
        finally:
            writer.close()
    return ExactTrace(path, meta, writer.paths, writer.rows, text.reader.consumed, truncated, issues)


class _Text:
    """Decoded text of a trace, buffered so that one JSON value at a time can be decoded."""

    def __init__(self, raw: BinaryIO, name: str, issues: list[ParseIssue]):
        self.reader = _Reader(raw, name, issues)
        self.name = name
        self.issues = issues
        self.utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.buf = ""
        self.pos = 0
        self.ended = False
        self._line = 1  # line number at `_line_pos` in `buf`
        self._line_pos = 0
        self._reported_utf8 = False

    def line_number(self) -> int:
        """Line of the cursor, counted incrementally so that the whole walk stays linear."""
        self._line += self.buf.count("\n", self._line_pos, self.pos)
        self._line_pos = self.pos
        return self._line

    def _fill(self) -> bool:
        """Append the next block of text; False at the end of the file."""
        if self.ended:
            return False
        block = self.reader.read()
        decoded = self.utf8.decode(block, final=not block)
        self.line_number()
        replaced = decoded.find("\ufffd")
        if replaced >= 0 and not self._reported_utf8:
            self._reported_utf8 = True
            line = self._line + self.buf.count("\n", self.pos) + decoded.count("\n", 0, replaced)
            self.issues.append(ParseIssue(self.name, line, None, "warning", "invalid UTF-8 was replaced by U+FFFD"))
        self.buf = self.buf[self.pos :] + decoded
        self.pos = self._line_pos = 0
        self.ended = not block
        return bool(block)

    def _peek(self, skip: str = " \t\r\n") -> str:
        """The next character that is not in `skip`, or "" at the end of the file."""
        while True:
            self.pos = _SKIP[skip].match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                return ""

    def _decode(self, decoder: json.JSONDecoder):
        """Decode the value at the cursor, reading on while it may just be incomplete."""
        self._peek()
        while True:
            try:
                value, end = decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError:
                if len(self.buf) - self.pos < MAX_VALUE_CHARS and self._fill():
                    continue
                raise
            self.pos = end
            return value

    def top_level(self, decoder: json.JSONDecoder) -> Iterator[tuple[str, object]]:
        first = self._peek()
        if first == "[":
            self.pos += 1
            yield "traceEvents", self._events(decoder)
            return
        if first != "{":
            raise NotATrace("it is not a JSON object or array")
        self.pos += 1
        while True:
            char = self._peek(" \t\r\n,")
            if char == "}":
                return
            if char == "":
                raise _Cut("the document has no closing brace")
            try:
                key = self._decode(decoder)
            except json.JSONDecodeError as bad:
                raise NotATrace(f"line {self.line_number()}: {bad.msg}") from None
            if self._peek() != ":":
                raise NotATrace(f"line {self.line_number()}: expected ':' after key {key!r}")
            self.pos += 1
            if key == "traceEvents" and self._peek() == "[":
                self.pos += 1
                yield key, self._events(decoder)
                continue
            try:
                yield key, self._decode(decoder)
            except json.JSONDecodeError as bad:
                if self.ended:
                    raise _Cut(f"the value of {key!r} at line {self.line_number()} is incomplete") from None
                raise NotATrace(f"line {self.line_number()}: {bad.msg}") from None

    def _events(self, decoder: json.JSONDecoder) -> Iterator[tuple[object, int]]:
        while True:
            char = self._peek(" \t\r\n,")
            if char == "]":
                self.pos += 1
                return
            if char == "":
                raise _Cut("the events array has no closing bracket")
            line = self.line_number()
            try:
                event = self._decode(decoder)
            except json.JSONDecodeError as bad:
                resumed = self._skip_to_next_event(line)
                self.issues.append(
                    ParseIssue(self.name, line, None, "error", f"malformed event skipped ({bad.msg}); resumed at line {resumed}")
                )
                continue
            yield event, line

    def _starts_object(self, index: int) -> bool:
        """Whether the text after a `{` looks like an object's start: a key or its end, not string text."""
        while index < len(self.buf) and self.buf[index] in " \t\r\n":
            index += 1
        return index < len(self.buf) and self.buf[index] in "\"}"

    def _skip_to_next_event(self, line: int) -> int:
        """Move past a malformed event to the next `{` that follows a `,`; return its line.

        With no further event the malformed one was the last, cut short: the file ends there.
        """
        self.pos += 1
        while True:
            comma = self.buf.find(",", self.pos)
            while comma >= 0:
                after = comma + 1
                while after < len(self.buf) and self.buf[after] in " \t\r\n":
                    after += 1
                if after < len(self.buf) and self.buf[after] == "{" and self._starts_object(after + 1):
                    self.pos = after
                    return self.line_number()
                comma = self.buf.find(",", comma + 1)
            self.pos = max(self.pos, len(self.buf) - 1)
            if not self._fill():
                raise _Cut(f"the event at line {line} is incomplete and nothing follows it")


class _LineWriter:
    """Writes NDJSON files of about `chunk_bytes` each."""

    def __init__(self, out_dir: Path, chunk_bytes: int):
        self.out_dir = out_dir
        self.chunk_bytes = chunk_bytes
        self.paths: list[Path] = []
        self.file: BinaryIO | None = None
        self.size = 0
        self.rows = 0

    def write(self, row: bytes) -> None:
        if self.file is None:
            path = self.out_dir / f"exact-{len(self.paths):05d}.ndjson"
            self.paths.append(path)
            self.file = open(path, "wb")
        self.file.write(row)
        self.file.write(b"\n")
        self.size += len(row) + 1
        self.rows += 1
        if self.size >= self.chunk_bytes:
            self.close()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
            self.size = 0


def _plain(value):
    """Metadata with Decimals turned back into floats: only timestamps need to stay exact."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


def _sanitise(event, arg_keys: frozenset[str], file: str, line: int, issues: list[ParseIssue]) -> bytes | None:
    """One event as an NDJSON line typed the way the normaliser reads it, or None if unusable."""
    if not isinstance(event, dict):
        issues.append(ParseIssue(file, line, None, "error", f"an event is a {type(event).__name__}, not an object; skipped"))
        return None
    out: dict = {}
    for key in ("ph", "cat", "name", "pid", "tid"):
        value = event.get(key)
        if value is not None:
            out[key] = value if isinstance(value, str) else orjson.dumps(_plain(value)).decode()
    for key in ("ts", "dur"):
        value = event.get(key)
        if value is None:
            continue
        number = _as_decimal(value)
        if number is None:
            issues.append(
                ParseIssue(file, line, None, "error", f"event {out.get('name')!r} has a non-numeric {key} {value!r}; skipped")
            )
            return None
        out[key] = str(number)
    args = event.get("args")
    if isinstance(args, dict):
        kept = {}
        for key in arg_keys.intersection(args):
            value = args[key]
            if isinstance(value, (dict, list)):
                kept[key] = orjson.dumps(_plain(value)).decode()
            elif value is not None:
                kept[key] = str(value)
        if kept:
            out["args"] = kept
    elif args is not None:
        issues.append(
            ParseIssue(file, line, None, "warning", f"event {out.get('name')!r} has args that are not an object; they were dropped")
        )
    return orjson.dumps(out)


def _as_decimal(value) -> decimal.Decimal | None:
    if isinstance(value, bool):
        return None
    try:
        number = decimal.Decimal(value if isinstance(value, (int, decimal.Decimal)) else str(value))
    except (decimal.InvalidOperation, ValueError):
        return None
    return number if number.is_finite() else None
