"""Files built once and kept between runs: the report's Vega bundle, the tables' lineage, the
schema-only Parquet files of a new warehouse and of every empty table.

Each is named by what it was built from (a version, a digest of the SQL), so a change makes a
new file and a stale one is never read. A folder that cannot be written only costs the rebuild.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def cache_dir() -> Path:
    """$WIRESPEED_CACHE, else the user's cache folder."""
    if os.environ.get("WIRESPEED_CACHE"):
        return Path(os.environ["WIRESPEED_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "wirespeed"


def kept(name: str, build: Callable[[], str]) -> str:
    """The text kept under `name`, built and kept first if it is not there."""
    return kept_bytes(name, lambda: build().encode("utf-8")).decode("utf-8")


def kept_bytes(name: str, build: Callable[[], bytes]) -> bytes:
    """The bytes kept under `name`, built and kept first if they are not there."""
    path = cache_dir() / name
    try:
        return path.read_bytes()
    except OSError:
        pass
    data = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=path.parent, delete=False, suffix=".part") as part:
            part.write(data)
        os.replace(part.name, path)  # whole or not at all, even with processes writing in parallel
    except OSError:
        pass
    return data
