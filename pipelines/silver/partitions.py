"""`scontrol show partition` output → silver.partitions: each partition's MaxTime, DefaultTime and state.

Both forms scontrol prints are read: `-o` (one partition per line) and the default block form (a
`PartitionName=` line followed by indented `Key=Value` lines). A record is a run of `Key=Value` tokens
starting at `PartitionName=`; values may hold `=` (`TRES=cpu=8,mem=32G`), the first `=` splits. MaxTime
`UNLIMITED`/`INFINITE` means no limit (`is_unlimited`); a MaxTime that is not a Slurm time rejects the
record with its reason. Used by gold to resolve `Timelimit = Partition_Limit` (docs/jobstats.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from conf import max_time_s

_NO_TIME = ("NONE", "N/A", "")


@dataclass(frozen=True)
class PartitionRecord:
    """One partition as scontrol showed it, with the line it starts on and its text (one line)."""

    line_no: int
    raw: str
    partition: str | None = None
    max_time_s: int | None = None
    is_unlimited: bool = False
    default_time_s: int | None = None
    state: str | None = None
    reason: str | None = None  # set when the record is rejected


def _time(fields: dict[str, str], key: str) -> tuple[int | None, bool]:
    """(seconds, is_unlimited) of a time field; ValueError naming the field and its text."""
    text = fields.get(key, "").strip()
    if text.upper() in _NO_TIME:
        return None, False
    try:
        seconds = max_time_s(text)
    except ValueError as exc:
        raise ValueError(f"bad {key}: {text!r}") from exc
    return seconds, seconds is None


def _record(line_no: int, tokens: list[str]) -> PartitionRecord:
    raw = " ".join(tokens)
    fields: dict[str, str] = {}
    for token in tokens:
        key, eq, value = token.partition("=")
        if not eq:
            return PartitionRecord(line_no, raw, reason=f"not a Key=Value token: {token!r}")
        fields.setdefault(key, value)
    name = fields.get("PartitionName", "").strip()
    if not name:
        return PartitionRecord(line_no, raw, reason="empty PartitionName")
    if "MaxTime" not in fields:
        return PartitionRecord(line_no, raw, partition=name, reason="no MaxTime")
    try:
        max_s, unlimited = _time(fields, "MaxTime")
        default_s, _ = _time(fields, "DefaultTime")
    except ValueError as exc:
        return PartitionRecord(line_no, raw, partition=name, reason=str(exc))
    return PartitionRecord(
        line_no,
        raw,
        partition=name,
        max_time_s=max_s,
        is_unlimited=unlimited,
        default_time_s=default_s,
        state=fields.get("State") or None,
    )


def parse_partitions(lines: list[str]) -> tuple[list[PartitionRecord], int]:
    """The partitions of one file's lines (numbered from 1) and the number of lines that hold no record
    start (continuation lines of the block form, blank lines, `#` comments). Text before the first
    `PartitionName=` is a record of its own, rejected."""
    records: list[PartitionRecord] = []
    current: tuple[int, list[str]] | None = None
    other = 0
    for no, line in enumerate(lines, start=1):
        tokens = line.split()
        if not tokens or line.lstrip().startswith("#"):
            other += 1
            continue
        if tokens[0].startswith("PartitionName="):
            if current is not None:
                records.append(_record(*current))
            current = (no, tokens)
        elif current is None:
            records.append(PartitionRecord(no, line.strip(), reason="no PartitionName= before this line"))
        else:
            current[1].extend(tokens)
            other += 1
    if current is not None:
        records.append(_record(*current))
    return records, other
