"""Where the warehouse and the landing folder are, for the commands, the Dagster resources and
notebooks alike: the folder given, else the environment's, else one in the working directory."""

from __future__ import annotations

import os
from pathlib import Path


def warehouse_dir(value: str | Path | None = None) -> Path:
    """The warehouse folder: `value`, else $WIRESPEED_HOME, else ./warehouse."""
    return Path(value or os.environ.get("WIRESPEED_HOME") or "warehouse")


def landing_dir(value: str | Path | None = None) -> Path:
    """The folder that receives run folders: `value`, else $WIRESPEED_LANDING, else ./landing."""
    return Path(value or os.environ.get("WIRESPEED_LANDING") or "landing")
