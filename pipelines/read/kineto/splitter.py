"""Cut a Kineto trace into small JSON-array files that DuckDB parses in parallel.

A rank's trace is one JSON object whose `traceEvents` array holds nearly all of its bytes. DuckDB
cannot read that object in bounded memory (it caps a JSON object at 4 GiB and needs several times
the file size), but it parses a file that *is* an array of events quickly, streaming, and on every
core when there are several such files. So this module streams the trace once, copies the events
array into chunk files of about `chunk_bytes` each, cutting only between two events, and parses
the small rest of the document (`distributedInfo`, `baseTimeNanoseconds`, ...) with orjson.

Cuts are made at the byte sequence that separates two events in this file (Kineto writes
`},\\n  {`; other writers `}, {` or `},{`). A raw newline can only be JSON whitespace, and a cut
anywhere but between two top-level events leaves a chunk with unbalanced brackets or an open
string, so a wrong cut never yields a wrong event: it yields a chunk that fails to parse, and the
caller then falls back to `pipelines.read.kineto.exact`, which walks the document event by event.

An uncompressed file is not read through Python at all: only the bytes around each cut are read
to place it, and the kernel copies the ranges between cuts into the chunk files (`os.sendfile`).
A compressed file is decompressed (with ISA-L) and streamed through the same cutting.

A truncated trace (the profiler killed while writing, a gzip stream cut short) keeps every
complete event before the cut; the cut is reported as a `ParseIssue` with its byte offset.

A compressed file may cost only so much: its text is read while it is at most `MAX_EXPANSION`
times the compressed bytes it came from (beyond a first `EXPANSION_SLACK_BYTES`), and where it
expands more, as gigabytes of whitespace packed into a few megabytes do, reading stops there as at
a cut, with the reason in `parse_issues`: such a file would otherwise hold a worker for minutes.
"""

from __future__ import annotations

import os
import queue
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import orjson
from isal import isal_zlib

from pipelines.read.issues import ParseIssue

READ_BYTES = 8 << 20
# Small enough that a file's chunks keep every core busy, large enough that there are few files.
DEFAULT_CHUNK_BYTES = 8 << 20
# How much is read around an intended cut to find the separator there.
CUT_WINDOW_BYTES = 1 << 20
# The document before `traceEvents` and after its closing bracket is small (device properties,
# process groups, log lines). Past this we stop looking.
MAX_HEADER_BYTES = 64 << 20
HEADER_READ_BYTES = 64 << 10
MAX_TAIL_BYTES = 64 << 20
# No event is this large: without a cut in this many bytes the separator guess is wrong.
MAX_CARRY_BYTES = 256 << 20
# Real traces expand 8 to 21 times under gzip (the 12 in ../shared/traces); deflate's most is
# about 1030. The slack lets a small file's header and first events through whatever its ratio.
MAX_EXPANSION = 200
EXPANSION_SLACK_BYTES = 16 << 20

_WS = b" \t\r\n"
_BETWEEN_EVENTS = re.compile(rb"[ \t\r\n,]*")
_EVENT_SEPARATOR = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]]')


class NotATrace(ValueError):
    """The file is not a Chrome/Kineto trace document."""


class CannotCut(ValueError):
    """The file may be a trace, but not one this module can cut; use the exact path."""


class TooExpanded(OSError):
    """A compressed stream expands more than a real file does: read no further."""


def expansion_bound(compressed_bytes: int) -> int:
    """The most text `compressed_bytes` of gzip may stand for before reading stops."""
    return MAX_EXPANSION * compressed_bytes + EXPANSION_SLACK_BYTES


def too_expanded(compressed_bytes: int, expanded_bytes: int) -> TooExpanded:
    return TooExpanded(
        f"not read past byte {expanded_bytes} of its text: its first {compressed_bytes} compressed bytes expand to more than "
        f"{MAX_EXPANSION} times their size (a real trace or log: 8 to 21 times), as a decompression bomb does"
    )


@dataclass
class SplitTrace:
    """What one pass over a trace file produced."""

    path: Path
    meta: dict
    chunk_paths: list[Path]
    layout: str
    input_bytes: int
    truncated: bool = False
    issues: list[ParseIssue] = field(default_factory=list)


def open_trace(path: Path) -> BinaryIO:
    """Open a trace, decompressing gzip (known by its magic bytes, not its name) with ISA-L."""
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return ReadAhead(GzipStream(open(path, "rb")))
    return open(path, "rb")


class GzipStream:
    """Decompresses every gzip member of a file, handing out all it could before a cut or damage.

    Python's gzip readers raise on a cut stream without returning what they decompressed of the
    block being read; a profiler killed mid-write needs every byte that made it to disk. The
    stream's end or damage is raised as EOFError or OSError on the read *after* the good data.
    """

    INPUT_BYTES = 1 << 20

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self.member = isal_zlib.decompressobj(31)
        self.member_started = False
        self.members_done = 0
        self.input = b""
        self.problem: Exception | None = None
        self.compressed = 0  # bytes read from the file
        self.expanded = 0  # bytes handed out

    def read(self, size: int) -> bytes:
        out: list[bytes] = []
        got = 0
        while got < size and self.problem is None:
            data = self.member.unconsumed_tail or self.input
            if not data:
                data = self.raw.read(self.INPUT_BYTES)
                self.compressed += len(data)
            self.input = b""
            if not data:
                if self.member_started and not self.member.eof:
                    self.problem = EOFError("the compressed stream ends before its end marker")
                break
            try:
                piece = self.member.decompress(data, size - got)
            except isal_zlib.error as damage:
                what = "data after the compressed stream" if self.members_done else "the compressed data"
                self.problem = OSError(f"{what} is damaged: {damage}")
                break
            self.member_started = True
            out.append(piece)
            got += len(piece)
            self.expanded += len(piece)
            used = self.compressed - len(self.member.unconsumed_tail) - len(self.member.unused_data)
            if self.expanded > expansion_bound(used):
                self.problem = too_expanded(used, self.expanded)
                break
            if self.member.eof:
                self.input = self.member.unused_data
                self.member = isal_zlib.decompressobj(31)
                self.member_started = False
                self.members_done += 1
        if not out and self.problem is not None:
            problem, self.problem = self.problem, None
            raise problem
        return b"".join(out)

    def close(self) -> None:
        self.raw.close()


class ReadAhead:
    """Decompresses the next blocks in a thread while the caller cuts and writes the last ones.

    ISA-L and file writes both release the interpreter, so on a large gzip trace the two overlap
    instead of taking turns. A read returns at most one block; the stream's end or damage is
    raised, as by `GzipStream`, on the read after the good data.
    """

    DEPTH = 2  # blocks decompressed ahead: enough to keep the thread busy, little memory

    def __init__(self, stream: GzipStream):
        self.stream = stream
        self.blocks: queue.Queue = queue.Queue(self.DEPTH)
        self.buffer = b""
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._decompress, name="wirespeed-gunzip", daemon=True)
        self.thread.start()

    def _decompress(self) -> None:
        while not self.stopping.is_set():
            try:
                block = self.stream.read(READ_BYTES)
            except (EOFError, OSError) as problem:
                self._put(problem)
                block = b""
            self._put(block)
            if not block:
                return

    def _put(self, item: bytes | Exception) -> None:
        while not self.stopping.is_set():
            try:
                self.blocks.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            parts = []
            while part := self.read(READ_BYTES):
                parts.append(part)
            return b"".join(parts)
        if not self.buffer:
            item = self.blocks.get()
            if isinstance(item, Exception):
                raise item
            if not item:
                self.blocks.put(item)  # the end stays the end for every later read
                return b""
            self.buffer = item
        block, self.buffer = self.buffer[:size], self.buffer[size:]
        return block

    def close(self) -> None:
        self.stopping.set()
        self.thread.join()
        self.stream.close()

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def split_trace(path: Path, out_dir: Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> SplitTrace:
    """Read `path` once, writing its events into chunk files under `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    issues: list[ParseIssue] = []
    writer = _ChunkWriter(out_dir, chunk_bytes)
    with open_trace(path) as stream:
        reader = _Reader(stream, str(path), issues)
        try:
            header, is_bare_array = _read_header(reader)
            if isinstance(stream, ReadAhead):
                separator, carry, carry_offset = _copy_events(reader, writer)
            else:
                separator, carry, carry_offset = _copy_ranges(stream, reader, writer)
            tail, truncated = _finish(carry, carry_offset, is_bare_array, writer, issues, str(path))
        finally:
            writer.close()
    meta = {} if is_bare_array else _parse_meta(header, tail, str(path), issues)
    input_bytes = max(reader.consumed, carry_offset + len(carry))
    return SplitTrace(path, meta, writer.paths, _describe(separator), input_bytes, truncated, issues)


class _Reader:
    """Block reader over the decompressed stream that counts bytes and survives a cut stream."""

    def __init__(self, stream: BinaryIO, name: str, issues: list[ParseIssue]):
        self.stream = stream
        self.name = name
        self.issues = issues
        self.consumed = 0
        self.pending = b""
        self.ended = False

    def read(self, size: int = READ_BYTES) -> bytes:
        if self.pending:
            block, self.pending = self.pending, b""
            return block
        if self.ended:
            return b""
        try:
            block = self.stream.read(size)
        except (EOFError, OSError) as cut:
            # Treat a damaged, cut or overexpanding compressed stream like a file that ends here.
            reason = str(cut) if isinstance(cut, TooExpanded) else f"compressed stream ends early: {cut}"
            self.issues.append(ParseIssue(self.name, None, self.consumed, "error", reason))
            block = b""
        if not block:
            self.ended = True
        self.consumed += len(block)
        return block

    def push_back(self, data: bytes) -> None:
        self.pending = data + self.pending


def _read_header(reader: _Reader) -> tuple[bytes, bool]:
    """Read up to the `[` that opens `traceEvents`; return the bytes before the key."""
    buf = b""
    size = HEADER_READ_BYTES
    while True:
        block = reader.read(size)
        size = min(2 * size, READ_BYTES)
        if not block:
            if not buf.strip(_WS):
                raise NotATrace("the file is empty")
            raise NotATrace("the file ends before any `traceEvents` array")
        buf += block
        start = len(buf) - len(buf.lstrip(_WS))
        if start == len(buf):
            continue
        first = buf[start : start + 1]
        if first == b"[":
            reader.push_back(buf[start + 1 :])
            return b"", True
        if first != b"{":
            raise NotATrace(f"it starts with {buf[start:start + 16]!r}, not a JSON object or array")
        found = _find_trace_events_key(buf)
        if found is not None:
            key_start, array_start = found
            reader.push_back(buf[array_start + 1 :])
            return buf[:key_start], False
        if len(buf) > MAX_HEADER_BYTES:
            raise NotATrace(f"no `traceEvents` array in its first {MAX_HEADER_BYTES} bytes")


def _find_trace_events_key(buf: bytes) -> tuple[int, int] | None:
    """Find the top-level `"traceEvents": [`: (key offset, `[` offset), or None if not read yet."""
    depth = 0
    for token in _TOKEN.finditer(buf):
        text = token.group()
        if text in (b"{", b"["):
            depth += 1
        elif text in (b"}", b"]"):
            depth -= 1
        elif depth == 1 and text == b'"traceEvents"':
            rest = buf[token.end() :].lstrip(_WS)
            if not rest.startswith(b":"):
                continue
            value = rest[1:].lstrip(_WS)
            if not value:
                return None
            if not value.startswith(b"["):
                raise NotATrace("its `traceEvents` is not an array")
            return token.start(), len(buf) - len(value)
    return None


def _copy_events(reader: _Reader, writer: _ChunkWriter) -> tuple[bytes | None, bytes, int]:
    """Copy whole events to the writer; return the separator, the unconsumed rest and its offset.

    The rest is kept in one bytearray, written from through views and trimmed from the front, so
    that no block is copied but into the chunk file: fresh copies of 8 MB blocks cost more than
    the decompression they follow.
    """
    separator: bytes | None = None
    carry = bytearray(reader.read())
    carry_offset = reader.consumed - len(carry)
    while True:
        if separator is None:
            separator = _guess_separator(carry)
        if separator is not None:
            cut = carry.rfind(separator)
            if cut > 0:
                writer.write_events(carry, separator, cut + 1)
                consumed = cut + len(separator) - 1
                carry_offset += consumed
                del carry[:consumed]
        if len(carry) > MAX_CARRY_BYTES:
            raise CannotCut(f"no boundary between events in {len(carry)} bytes from byte {carry_offset}")
        block = reader.read()
        if not block:
            return separator, bytes(carry), carry_offset
        carry += block


def _copy_ranges(file: BinaryIO, reader: _Reader, writer: _ChunkWriter) -> tuple[bytes | None, bytes, int]:
    """Like `_copy_events` for a plain file, reading only the bytes around each cut.

    Returns the separator, the file's last bytes after the last cut (read into memory, where the
    end of the array is found) and their offset.
    """
    size = os.fstat(file.fileno()).st_size
    position = reader.consumed - len(reader.pending)
    separator = _guess_separator(os.pread(file.fileno(), CUT_WINDOW_BYTES, position))
    window = min(CUT_WINDOW_BYTES, writer.chunk_bytes)
    while separator is not None and size - position > writer.chunk_bytes + window:
        cut = _find_cut(file, separator, position + writer.chunk_bytes, size, window)
        if cut is None:
            break
        writer.copy_range(file, position, cut + 1 - position)
        position = cut + len(separator) - 1
    if separator is None:
        # No separator in the first window: let the streaming cutter look further.
        file.seek(position)
        reader.pending, reader.consumed = b"", position
        return _copy_events(reader, writer)
    carry = os.pread(file.fileno(), size - position, position)
    return separator, carry, position


def _find_cut(file: BinaryIO, separator: bytes, start: int, size: int, window: int) -> int | None:
    """Offset of the first separator at or after `start`, reading `window` bytes at a time."""
    seen = b""
    offset = start
    while offset < size and len(seen) <= MAX_CARRY_BYTES:
        seen += os.pread(file.fileno(), window, offset)
        found = seen.find(separator)
        if found >= 0:
            return start + found
        offset = start + len(seen)
    if offset < size:
        raise CannotCut(f"no boundary between events in {len(seen)} bytes from byte {start}")
    return None


def _guess_separator(events: bytes) -> bytes | None:
    """The bytes between two events: the first `}`,`{` run whose cuts give events that parse.

    A run inside a string (a kernel named `a},{b`) fails that test and the next one is tried.
    """
    for match in _EVENT_SEPARATOR.finditer(events, 0, min(len(events), 1 << 20)):
        candidate = match.group()
        parts = events.split(candidate, 3)
        if len(parts) < 3:
            return None  # too few events seen yet to tell
        first = parts[0].lstrip(_WS) + b"}"
        second = b"{" + parts[1] + b"}"
        try:
            if isinstance(orjson.loads(first), dict) and isinstance(orjson.loads(second), dict):
                return candidate
        except orjson.JSONDecodeError:
            continue
    return None


def _describe(separator: bytes | None) -> str:
    if separator is None:
        return "one-event"
    return "kineto" if b"\n" in separator else "one-line"


class _ChunkWriter:
    """Writes `[event,event,...]` files of about `chunk_bytes` each."""

    def __init__(self, out_dir: Path, chunk_bytes: int):
        self.out_dir = out_dir
        self.chunk_bytes = chunk_bytes
        self.paths: list[Path] = []
        self.file: BinaryIO | None = None
        self.size = 0

    def write_events(self, events: bytes | bytearray, separator: bytes | None = None, end: int | None = None) -> None:
        """Append `events[:end]`: text that starts with an event's `{` and ends with a whole event's `}`.

        Text longer than the current chunk's room is cut at `separator` into several chunks.
        """
        end = len(events) if end is None else end
        start = 0
        with memoryview(events) as view:
            while separator is not None and end - start > self.chunk_bytes - self.size:
                cut = events.find(separator, start + max(1, self.chunk_bytes - self.size), end)
                if cut < 0:
                    break
                self._append(view[start : cut + 1])
                self._end_chunk()
                start = cut + len(separator) - 1
            self._append(view[start:end])
        if self.size >= self.chunk_bytes:
            self._end_chunk()

    def copy_range(self, file: BinaryIO, offset: int, length: int) -> None:
        """Make bytes `offset` to `offset + length` of `file` (whole events) one chunk, in the kernel."""
        self._end_chunk()
        path = self.out_dir / f"chunk-{len(self.paths):05d}.json"
        self.paths.append(path)
        with open(path, "wb") as chunk:
            chunk.write(b"[")
            chunk.flush()
            while length > 0:
                sent = os.sendfile(chunk.fileno(), file.fileno(), offset, length)
                if sent == 0:
                    raise CannotCut(f"the file ended while copying byte {offset}")
                offset += sent
                length -= sent
            chunk.write(b"]")

    def _append(self, events: memoryview) -> None:
        if self.file is None:
            path = self.out_dir / f"chunk-{len(self.paths):05d}.json"
            self.paths.append(path)
            self.file = open(path, "wb")
            self.file.write(b"[")
        else:
            self.file.write(b",")
        self.file.write(events)
        self.size += len(events)

    def _end_chunk(self) -> None:
        if self.file is None:
            return
        self.file.write(b"]")
        self.file.close()
        self.file = None
        self.size = 0

    def close(self) -> None:
        self._end_chunk()


def _finish(
    carry: bytes, offset: int, is_bare_array: bool, writer: _ChunkWriter, issues: list[ParseIssue], name: str
) -> tuple[bytes, bool]:
    """Write the last events; return the document's tail after the array and whether it was cut."""
    end = _find_array_end(carry, is_bare_array)
    if end is not None:
        events = carry[:end].rstrip(_WS)
        if events:
            writer.write_events(events)
        return carry[end + 1 :], False
    kept, cut_at = _whole_events(carry)
    for event_text in kept:
        writer.write_events(event_text)
    issues.append(
        ParseIssue(
            name,
            None,
            offset + cut_at,
            "error",
            f"the trace is cut off: {len(carry) - cut_at} bytes after its last complete event were skipped",
        )
    )
    return b"", True


def _last_non_space(data: bytes, end: int) -> int:
    """Index of the last byte before `end` that is not JSON whitespace, or -1."""
    return len(data[:end].rstrip(_WS)) - 1


def _find_array_end(carry: bytes, is_bare_array: bool) -> int | None:
    """Offset of the `]` closing `traceEvents` among the file's last bytes, or None if it is cut."""
    position = len(carry)
    while True:
        position = carry.rfind(b"]", 0, position)
        if position < 0 or len(carry) - position > MAX_TAIL_BYTES:
            return None
        before = _last_non_space(carry, position)
        if before >= 0 and carry[before] != ord("}"):
            continue
        after = carry[position + 1 :].strip(_WS)
        if is_bare_array:
            if not after:
                return position
            continue
        if after == b"}":
            return position
        if after.startswith(b","):
            try:
                orjson.loads(b"{" + after[1:])
            except orjson.JSONDecodeError:
                continue
            return position


def _whole_events(carry: bytes) -> tuple[list[bytes], int]:
    """Split the last bytes of a cut file into its whole events and the offset of the cut."""
    kept: list[bytes] = []
    position = 0
    while True:
        start = _BETWEEN_EVENTS.match(carry, position).end()
        end = _object_end(carry, start)
        if end is None:
            return kept, start
        kept.append(carry[start:end])
        position = end


def _object_end(data: bytes, start: int) -> int | None:
    """End offset of the JSON object that starts at `start`, or None if it does not complete."""
    if data[start : start + 1] != b"{":
        return None
    depth = 0
    for token in _TOKEN.finditer(data, start):
        text = token.group()
        if text in (b"{", b"["):
            depth += 1
        elif text in (b"}", b"]"):
            depth -= 1
            if depth == 0:
                try:
                    orjson.loads(data[start : token.end()])
                except orjson.JSONDecodeError:
                    return None
                return token.end()
    return None


def _parse_meta(header: bytes, tail: bytes, name: str, issues: list[ParseIssue]) -> dict:
    """Parse everything but the events: the header before the array and the tail after it."""
    rest = tail.strip(_WS)
    if rest.startswith(b","):
        rest = rest[1:].lstrip(_WS)
    closing = b"," + rest if rest and rest != b"}" else b"}"
    for document in (header + b'"traceEvents": []' + closing, header + b'"traceEvents": []}'):
        try:
            meta = orjson.loads(document)
            break
        except orjson.JSONDecodeError as bad:
            problem = bad
    else:
        issues.append(ParseIssue(name, None, None, "warning", f"the trace's metadata does not parse: {problem}"))
        return {}
    meta.pop("traceEvents", None)
    return meta
