"""Consecutive ranks grouped by how much each holds, for work done a group of ranks at a time:
the sweep reads its intervals so (pipelines/analysis/sweep.py), and a large run builds some
intermediates so (`BY_RANKS`, pipelines/analysis/tables.py), each group about as large as the
memory it may take allows."""

from __future__ import annotations


def rank_ranges(counts: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """The (first, last) ranks of consecutive groups, from each rank's count in rank order: each
    group holds at most `size`, or is one rank that holds more."""
    ranges: list[tuple[int, int]] = []
    held = 0
    for rank, count in counts:
        if ranges and held + count <= size:
            ranges[-1] = (ranges[-1][0], rank)
            held += count
        else:
            ranges.append((rank, rank))
            held = count
    return ranges
