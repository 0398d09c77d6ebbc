"""Scalar parsers for Slurm's text forms: memory sizes, durations, exit codes, TRES strings, hostlists.

Each `parse_*` function takes one string and returns a plain value; it raises `ValueError` naming the
offending text when the text is not of the form it parses. An empty string (sacct's empty field) gives
None wherever a value can be missing. The `*_col` functions are the same parsers as Spark Columns
(built-ins only, except the hostlist expansion, which is an Arrow-batched pandas UDF); a Column parser
yields null for text it cannot parse, and the matching `*_ok_col` says whether the text was well formed.

Units: memory in bytes (K/M/G/T/P/E are powers of 1024, as Slurm uses them), durations in seconds.
KIB, MIB and GIB are the byte sizes every module uses for binary units; GB (10^9) is only for names that
state decimal gigabytes, such as MIG profiles (`parse_mig_profile`).
"""

from __future__ import annotations

import re
from itertools import product

import pandas as pd
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

KIB = 1024
MIB = 1024**2
GIB = 1024**3
GB = 10**9

MEM_FACTORS: dict[str, int] = {
    "": 1,
    "K": KIB,
    "M": MIB,
    "G": GIB,
    "T": 1024 * GIB,
    "P": 1024**2 * GIB,
    "E": 1024**3 * GIB,
}

# A MIG profile name: <compute slices>g.<memory in GB>gb, lower case, with an optional media or graphics
# suffix (`1g.10gb`, `3g.40gb`, `1g.10gb+me`). One pattern for the Python parser and the Spark Columns.
MIG_PROFILE_RE = r"([0-9]+)g\.([0-9]+)gb(?:[+-][a-z.]+)?"
# MIG instances are priced and counted by compute slices out of the 7 of an A100/H100.
MIG_SLICES_PER_GPU = 7

# sacct prints these in duration fields when there is no finite value.
NO_DURATION: frozenset[str] = frozenset({"UNLIMITED", "PARTITION_LIMIT", "INVALID", "NONE", "UNKNOWN"})

# ReqMem per-unit kinds: the whole job, per allocated CPU (old `c` suffix), per node (old `n` suffix).
REQ_MEM_JOB, REQ_MEM_PER_CPU, REQ_MEM_PER_NODE = "job", "cpu", "node"

_MEM_RE = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)([KMGTPE]?)$", re.IGNORECASE)
_REQ_MEM_RE = re.compile(r"^(\d+(?:\.\d*)?)([KMGTPE]?)([CN]?)$", re.IGNORECASE)
_DIRECTIVE_MEM_RE = re.compile(r"^(\d+(?:\.\d*)?)\s*([KMGTPE]?)(?:I?B)?$", re.IGNORECASE)
_DURATION_RE = re.compile(r"^(\d+-)?\d+(:\d+){0,2}(\.\d+)?$")
_EXIT_RE = re.compile(r"^(\d+):(\d+)$")


def parse_mem_bytes(text: str) -> int | None:
    """A sacct memory figure (`MaxRSS`, `AveRSS`, TRES `mem`) in bytes: `4224K`, `2200M`, `1.5G`, or a bare
    number of bytes (`--noconvert`, or `0`). Empty → None."""
    s = text.strip()
    if not s:
        return None
    m = _MEM_RE.match(s)
    if not m:
        raise ValueError(f"not a memory size: {text!r}")
    return round(float(m.group(1)) * MEM_FACTORS[m.group(2).upper()])


def parse_req_mem(text: str) -> tuple[int, str] | None:
    """sacct `ReqMem` as (bytes, kind): kind is `cpu` for the pre-21.08 `Mc` form (per allocated CPU),
    `node` for `Mn` (per node), `job` for the newer unsuffixed form (`16G`, the job's total). A bare
    number is MiB, as Slurm stores requests. `0n` is (0, "node"): all of each node's memory. Empty → None."""
    s = text.strip()
    if not s:
        return None
    m = _REQ_MEM_RE.match(s)
    if not m:
        raise ValueError(f"not a ReqMem value: {text!r}")
    unit = m.group(2).upper() or "M"
    kind = {"C": REQ_MEM_PER_CPU, "N": REQ_MEM_PER_NODE, "": REQ_MEM_JOB}[m.group(3).upper()]
    return round(float(m.group(1)) * MEM_FACTORS[unit]), kind


def req_mem_total_bytes(text: str, alloc_cpus: int | None, nodes: int | None) -> int | None:
    """A job's total requested memory in bytes: per-CPU requests × AllocCPUS, per-node × NNodes
    (reportseff's `parsemem`). None when empty, when a multiplier is unknown, or for `0` (whole node)."""
    parsed = parse_req_mem(text)
    if parsed is None or parsed[0] == 0:
        return None
    value, kind = parsed
    if kind == REQ_MEM_JOB:
        return value
    factor = alloc_cpus if kind == REQ_MEM_PER_CPU else nodes
    return value * factor if factor else None


def parse_directive_mem_bytes(text: str) -> int:
    """An `sbatch --mem=`/`--mem-per-cpu=`/`--mem-per-gpu=` value in bytes: `16G`, `500M`, `16GB`; a bare
    number is MiB (Slurm's default unit for memory requests)."""
    s = text.strip()
    m = _DIRECTIVE_MEM_RE.match(s)
    if not m:
        raise ValueError(f"not a memory request: {text!r}")
    unit = m.group(2).upper() or "M"
    return round(float(m.group(1)) * MEM_FACTORS[unit])


def parse_duration_s(text: str) -> float | None:
    """A Slurm duration in seconds. Forms: `D-HH:MM:SS`, `D-HH:MM`, `D-HH`, `HH:MM:SS`, `MM:SS`,
    `MM:SS.mmm` (TotalCPU), `MM` (minutes only, as in `-t 30` or TimelimitRaw). `UNLIMITED`,
    `Partition_Limit`, `INVALID` and empty → None."""
    s = text.strip()
    if not s or s.upper() in NO_DURATION:
        return None
    if not _DURATION_RE.match(s):
        raise ValueError(f"not a Slurm duration: {text!r}")
    days, has_day, rest = s.partition("-") if "-" in s else ("0", "", s)
    parts = rest.split(":")
    if any("." in p for p in parts[:-1]) or (has_day and "." in s) or (not has_day and "." in parts[0]):
        raise ValueError(f"not a Slurm duration: {text!r}")
    if has_day:  # D-HH[:MM[:SS]]
        hh, mm, ss = [*parts, "0", "0"][:3]
        return int(days) * 86400 + int(hh) * 3600 + int(mm) * 60 + float(ss)
    if len(parts) == 1:  # minutes only
        return int(parts[0]) * 60.0
    if len(parts) == 2:  # MM:SS[.mmm]
        return int(parts[0]) * 60 + float(parts[1])
    return int(parts[0]) * 3600 + int(parts[1]) * 60 + float(parts[2])


def parse_mig_profile(text: str) -> tuple[int, int]:
    """A MIG profile name (`1g.10gb`, `3G.40GB`) as (compute slices, memory bytes), the memory read as GB."""
    m = re.fullmatch(MIG_PROFILE_RE, text.strip().lower())
    if not m:
        raise ValueError(f"not a MIG profile: {text!r}")
    return int(m.group(1)), int(m.group(2)) * GB


def mig_fraction(profile: str | None) -> float:
    """Share of a whole GPU a MIG profile holds (compute slices / 7); 1.0 for a whole GPU or no profile."""
    try:
        return parse_mig_profile(profile or "")[0] / MIG_SLICES_PER_GPU
    except ValueError:
        return 1.0


def parse_exit_code(text: str) -> tuple[int, int] | None:
    """sacct `ExitCode`/`DerivedExitCode` `N:S` as (exit status, signal). Empty → None."""
    s = text.strip()
    if not s:
        return None
    m = _EXIT_RE.match(s)
    if not m:
        raise ValueError(f"not an exit code N:S: {text!r}")
    return int(m.group(1)), int(m.group(2))


def parse_tres_value(key: str, value: str) -> float | None:
    """One TRES value in its natural unit: `cpu=00:56:24` (usage) → seconds; a value with a size
    suffix (`mem=16G`, `gres/gpumem=38888M`) → bytes; a plain number → that number (counts, bytes
    under --noconvert, `gres/gpuutil` percent, energy joules). `INFINITE`/empty → None."""
    v = value.strip()
    if not v or v.upper() in {"INFINITE", "N/A"}:
        return None
    if ":" in v or "-" in v:
        return parse_duration_s(v)
    try:
        return float(v)
    except ValueError:
        pass
    try:
        return float(parse_mem_bytes(v) or 0)
    except ValueError:
        raise ValueError(f"not a TRES value for {key}: {value!r}") from None


def parse_tres(text: str) -> dict[str, float | None]:
    """A TRES string (`cpu=4,mem=16G,node=1,billing=4,gres/gpu=2,gres/gpu:a100=2`, or a TRESUsageIn*
    string with `gres/gpumem=38888M,gres/gpuutil=100`) as {name: value} with values converted by
    `parse_tres_value` (bytes, seconds, counts, percent). Empty → {}."""
    s = text.strip()
    if not s:
        return {}
    out: dict[str, float | None] = {}
    for item in s.split(","):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"not a TRES string: {text!r}")
        out[key.strip()] = parse_tres_value(key.strip(), value)
    return out


def tres_gpu_model(tres: dict[str, float | None]) -> str | None:
    """The GPU model named in a parsed TRES dict (`gres/gpu:a100=2` → `a100`); None when absent."""
    models = sorted(k.split(":", 1)[1] for k in tres if k.startswith("gres/gpu:"))
    return models[0] if models else None


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"not a hostlist: {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise ValueError(f"not a hostlist: {text!r}")
    parts.append(text[start:])
    return parts


def _expand_range(spec: str, whole: str) -> list[str]:
    out = []
    for item in spec.split(","):
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"not a hostlist: {whole!r}")
        if not sep:
            out.append(lo)
            continue
        if int(hi) < int(lo):
            raise ValueError(f"not a hostlist: {whole!r}")
        width = len(lo)
        out.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
    return out


def expand_hostlist(text: str) -> list[str]:
    """A Slurm hostlist (`g[001-003,007],cpu12`, `a[1-2]-ib[0-1]`) as host names, in order, with zero
    padding kept. Empty or `None assigned` → []."""
    s = text.strip()
    if not s or s.lower().startswith("none"):
        return []
    hosts: list[str] = []
    for part in _split_top_level(s):
        if not part:
            raise ValueError(f"not a hostlist: {text!r}")
        pieces = re.split(r"(\[[^\]]*\])", part)
        choices = [_expand_range(p[1:-1], text) if p.startswith("[") else [p] for p in pieces if p]
        hosts.extend("".join(combo) for combo in product(*choices))
    return hosts


# ---- Spark Column equivalents -------------------------------------------------------------------

_MEM_COL_RE = r"^([0-9]+(\.[0-9]*)?)([KMGTPEkmgtpe]?)$"
_REQ_MEM_COL_RE = r"^([0-9]+(\.[0-9]*)?)([KMGTPEkmgtpe]?)([cnCN]?)$"
_DURATION_COL_RE = r"^([0-9]+-)?[0-9]+(:[0-9]+){0,2}(\.[0-9]+)?$"


def _blank(c: Column) -> Column:
    return c.isNull() | (F.trim(c) == "")


def _unit_factor(unit: Column, default: int = 1) -> Column:
    expr = F.lit(default).cast("double")
    for letter, factor in MEM_FACTORS.items():
        if letter:
            expr = F.when(F.upper(unit) == letter, F.lit(float(factor))).otherwise(expr)
    return expr


def mem_bytes_col(c: Column) -> Column:
    """`parse_mem_bytes` as a Column (bigint bytes; null for empty or malformed text)."""
    s = F.trim(c)
    number = F.regexp_extract(s, _MEM_COL_RE, 1)
    unit = F.regexp_extract(s, _MEM_COL_RE, 3)
    return F.when(s.rlike(_MEM_COL_RE), F.round(number.cast("double") * _unit_factor(unit)).try_cast("long"))


def mem_ok_col(c: Column) -> Column:
    """Whether a memory field is empty or a well-formed size that fits in 64 bits."""
    return _blank(c) | mem_bytes_col(c).isNotNull()


def req_mem_cols(c: Column) -> tuple[Column, Column]:
    """`parse_req_mem` as Columns: (bytes as bigint, kind `job`|`cpu`|`node`); nulls when empty/malformed."""
    s = F.trim(c)
    number = F.regexp_extract(s, _REQ_MEM_COL_RE, 1)
    unit = F.regexp_extract(s, _REQ_MEM_COL_RE, 3)
    suffix = F.upper(F.regexp_extract(s, _REQ_MEM_COL_RE, 4))
    ok = s.rlike(_REQ_MEM_COL_RE)
    value = F.when(ok, F.round(number.cast("double") * _unit_factor(unit, MEM_FACTORS["M"])).try_cast("long"))
    kind = F.when(ok, F.when(suffix == "C", REQ_MEM_PER_CPU).when(suffix == "N", REQ_MEM_PER_NODE))
    return value, F.when(ok, F.coalesce(kind, F.lit(REQ_MEM_JOB)))


def req_mem_ok_col(c: Column) -> Column:
    """Whether a ReqMem field is empty or a well-formed size that fits in 64 bits."""
    return _blank(c) | req_mem_cols(c)[0].isNotNull()


def duration_s_col(c: Column) -> Column:
    """`parse_duration_s` as a Column (double seconds; null for empty, UNLIMITED-like or malformed)."""
    s = F.trim(c)
    has_day = s.contains("-")
    days = F.when(has_day, F.substring_index(s, "-", 1).try_cast("double")).otherwise(F.lit(0.0))
    rest = F.substring_index(s, "-", -1)
    parts = F.split(rest, ":")
    n = F.size(parts)
    p1 = F.element_at(parts, 1).cast("double")
    p2 = F.element_at(parts, F.least(n, F.lit(2))).cast("double")
    p3 = F.element_at(parts, F.least(n, F.lit(3))).cast("double")
    clock = (
        F.when(has_day & (n == 1), p1 * 3600)
        .when(has_day & (n == 2), p1 * 3600 + p2 * 60)
        .when(n == 1, p1 * 60)
        .when(n == 2, p1 * 60 + p2)
        .otherwise(p1 * 3600 + p2 * 60 + p3)
    )
    return F.when(s.rlike(_DURATION_COL_RE), days * 86400 + clock)


def duration_ok_col(c: Column) -> Column:
    """Whether a duration field is empty, a no-value word (UNLIMITED, Partition_Limit, ...) or well formed."""
    s = F.trim(c)
    return _blank(c) | F.upper(s).isin(*NO_DURATION) | s.rlike(_DURATION_COL_RE)


def exit_code_cols(c: Column) -> tuple[Column, Column]:
    """`parse_exit_code` as Columns: (exit status, signal) as ints; nulls when empty or malformed."""
    s = F.trim(c)
    ok = s.rlike(r"^[0-9]+:[0-9]+$")
    return (
        F.when(ok, F.substring_index(s, ":", 1).try_cast("int")),
        F.when(ok, F.substring_index(s, ":", -1).try_cast("int")),
    )


def exit_code_ok_col(c: Column) -> Column:
    """Whether an exit-code field is empty or `N:S`."""
    return _blank(c) | F.trim(c).rlike(r"^[0-9]+:[0-9]+$")


def mig_slices_col(c: Column) -> Column:
    """`parse_mig_profile`'s compute slices as a Column (int); null for a null or malformed profile."""
    s = F.lower(F.trim(c))
    whole = f"^{MIG_PROFILE_RE}$"
    return F.when(s.rlike(whole), F.regexp_extract(s, whole, 1).try_cast("int"))


def tres_map_col(c: Column) -> Column:
    """A TRES string as a map<string,string> of raw values (`str_to_map`); null when empty."""
    s = F.trim(c)
    return F.when(~_blank(c), F.str_to_map(s, F.lit(","), F.lit("=")))


def tres_ok_col(c: Column) -> Column:
    """Whether a TRES field is empty or a comma-separated list of name=value items."""
    return _blank(c) | F.trim(c).rlike(r"^[^=,]+=[^=,]*(,[^=,]+=[^=,]*)*$")


def tres_count_col(tres: Column, key: str) -> Column:
    """A count from a TRES map (`cpu`, `node`, `gres/gpu`) as a long; null when absent."""
    return F.try_element_at(tres, F.lit(key)).try_cast("double").try_cast("long")


def tres_mem_col(tres: Column, key: str) -> Column:
    """A memory amount from a TRES map (`mem=16G`, `gres/gpumem=38888M`, or bytes) in bytes."""
    return mem_bytes_col(F.try_element_at(tres, F.lit(key)))


def tres_number_col(tres: Column, key: str) -> Column:
    """A plain number from a TRES map (`gres/gpuutil=100`) as a double; null when absent or INFINITE."""
    return F.try_element_at(tres, F.lit(key)).try_cast("double")


def tres_gpu_model_col(c: Column) -> Column:
    """The first `gres/gpu:<model>` named in a TRES string (`gres/gpu:a100=2` → `a100`); null when none."""
    model = F.regexp_extract(c, r"gres/gpu:([^=,]+)=", 1)
    return F.when(model != "", model)


@F.pandas_udf(T.ArrayType(T.StringType()))
def expand_hostlist_col(hostlists: pd.Series) -> pd.Series:
    """`expand_hostlist` as a Column (array<string>); null for null or malformed hostlists."""

    def one(text: str | None) -> list[str] | None:
        if text is None:
            return None
        try:
            return expand_hostlist(text)
        except ValueError:
            return None

    return hostlists.map(one)
