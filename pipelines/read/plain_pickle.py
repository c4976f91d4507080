"""Load a pickle that holds only plain values, and nothing that could run.

torch writes its Flight Recorder dumps as pickles (NCCL's dump on a timeout, `_dump_fr_trace()`):
dicts, lists, tuples, strings, numbers, booleans and None. Everything a pickle can do beyond
building those goes through a global it names (a class, `os.system`): the unpickler here refuses
every global, the "restricting globals" pattern of Python's pickle documentation, so a pickle that
asks for one stops there, before any call, and nothing in it runs. Persistent ids and out-of-band
buffers are refused too (pickle's own defaults).

What loads is then made into JSON's values, as if the same dump had been written as JSON: tuples
become lists, and a value JSON cannot hold (bytes, a set, a number past 64 bits, a key that is not
a string) refuses the file. A pickle can name one object many times at two bytes each, so that a
few kilobytes would stand for gigabytes of text once written out: the loaded value's size, counted
as a tree, is bounded by a multiple of the file's bytes (`MAX_EXPANSION`), and a pickle whose
objects hold themselves is refused.
"""

from __future__ import annotations

import io
import pickle

# A plain pickle's tree is at most this many times its bytes, counting one per value and one per
# character. torch's dumps name each repeated string once and refer to it after (two bytes for a
# file path of any length): 2.4 times for a gloo job's dump with 9-frame stacks; the bound leaves
# room for deep stacks of long paths.
MAX_EXPANSION = 64
_INT64 = (-(1 << 63), (1 << 63) - 1)


class NotPlain(ValueError):
    """The pickle asks for more than plain values, or is not a pickle one can read."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"it names the global {module}.{name}")


def load(data: bytes):
    """The plain value `data` pickles, tuples as lists; NotPlain with the reason otherwise."""
    try:
        value = _PlainUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as refused:
        raise NotPlain(str(refused)) from None
    except Exception as bad:  # a damaged pickle fails in many ways (EOFError, ValueError, ...)
        raise NotPlain(f"it does not load ({type(bad).__name__}: {bad})") from None
    return _plain(value, MAX_EXPANSION * max(len(data), 1024))


def _plain(root, budget: int):
    """`root` as JSON's values, walked without recursion; each container is rebuilt once (by id)."""
    built: dict[int, tuple[object, int]] = {}  # id: (its copy, its size as a tree)
    on_path: set[int] = set()
    stack: list = []  # (container, its copy, an iterator over its items, the total when it was entered)
    total = 0

    def enter(value) -> object:
        nonlocal total
        if isinstance(value, str):
            total += 1 + len(value)
            return value
        if isinstance(value, int) and not isinstance(value, bool) and not _INT64[0] <= value <= _INT64[1]:
            raise NotPlain("it holds an integer past 64 bits")
        if value is None or isinstance(value, (bool, int, float)):
            total += 1
            return value
        if not isinstance(value, (dict, list, tuple)):
            raise NotPlain(f"it holds a {type(value).__name__}, which a Flight Recorder dump never does")
        key = id(value)
        if key in on_path:
            raise NotPlain("it holds a container that holds itself")
        if key in built:
            copy, size = built[key]
            total += size
            return copy
        copy = {} if isinstance(value, dict) else []
        stack.append((value, copy, iter(value.items() if isinstance(value, dict) else value), total))
        on_path.add(key)
        total += 1
        return copy

    result = enter(root)
    while stack:
        if total > budget:
            raise NotPlain(f"it stands for more than {MAX_EXPANSION} times its size once written out")
        value, copy, items, started = stack[-1]
        item = next(items, _END)
        if item is _END:
            stack.pop()
            on_path.discard(id(value))
            built[id(value)] = (copy, total - started)
        elif isinstance(copy, dict):
            name, item = item
            if not isinstance(name, str):
                raise NotPlain(f"it holds a key of type {type(name).__name__}, not a string")
            total += len(name)
            copy[name] = enter(item)
        else:
            copy.append(enter(item))
    if total > budget:
        raise NotPlain(f"it stands for more than {MAX_EXPANSION} times its size once written out")
    return result


_END = object()
