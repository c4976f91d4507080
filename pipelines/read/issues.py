"""What ingestion skipped or doubted, so that nothing is lost silently.

Every parser appends `ParseIssue`s instead of raising for bad input; the run's ingest records them
in the `parse_issues` table, asset checks count them and the report lists them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParseIssue:
    file: str
    line: int | None
    byte_offset: int | None
    severity: str  # "error": data was skipped; "warning": kept but doubtful; "info": a file that holds no input
    reason: str

    def where(self) -> str:
        """`file:line` or `file@byte`, the way people point at a place in a file."""
        if self.line is not None:
            return f"{self.file}:{self.line}"
        if self.byte_offset is not None:
            return f"{self.file}@{self.byte_offset}"
        return self.file
