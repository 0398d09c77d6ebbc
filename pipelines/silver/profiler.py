"""PyTorch profiler traces (Kineto's Chrome-trace JSON, from CUPTI on NVIDIA or roctracer on AMD) into typed
events, read as a stream: peak memory does not grow with the file.

Input: an open binary stream of the decompressed JSON (the caller opens the file and gunzips it). Two passes:
`read_trace_meta` walks the top level for the trace's own facts (distributedInfo, deviceProperties,
baseTimeNanoseconds, host name) and skips the events token by token; `read_trace_events` builds one event at a
time (ijson's C builder) and yields a typed row or a reject.

Output: one `EVENT_FIELDS` row per complete (`ph: X`) event, its category mapped to one vocabulary
(`KINDS`) across the two generations of category names; the other phases (flows, instants, metadata) are
counted, not kept. Rejected, with a reason: an event that is not an object, an X event without a numeric
`ts`/`dur` or with a negative `dur`, without a name or category."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import ijson

# Raw category (as written by PyTorch <= 1.9, then later) -> our kind. One registry for both generations.
KINDS: dict[str, str] = {
    "operator": "cpu_op",
    "cpu_op": "cpu_op",
    "python": "python_function",
    "python_function": "python_function",
    "user_annotation": "user_annotation",
    "gpu_user_annotation": "gpu_user_annotation",
    "runtime": "runtime",
    "cuda_runtime": "runtime",
    "cuda_driver": "driver",
    "kernel": "kernel",
    "memcpy": "memcpy",
    "gpu_memcpy": "memcpy",
    "memset": "memset",
    "gpu_memset": "memset",
    "cuda_sync": "cuda_sync",
    "trace": "trace",
    "cuda_profiler_range": "profiler_range",
}
# Kinds that run on the device (they carry a stream); the rest are host-side.
GPU_KINDS = frozenset({"kernel", "memcpy", "memset"})
# Kinds that say nothing of the host's timeline (device-side annotations, the profiler's own spans).
NOT_HOST_KINDS = GPU_KINDS | {"gpu_user_annotation", "cuda_sync", "trace", "other"}
# Categories named by the older generation (PyTorch 1.8-1.9); any of them marks a trace as `legacy`.
LEGACY_CATS = frozenset({"Operator", "Runtime", "Kernel", "Memcpy", "Memset"})
# Traces whose `ts` is below this are relative to `baseTimeNanoseconds` (µs since the epoch otherwise).
EPOCH_US_MIN = 1e14  # 1973-03-03 in µs since the epoch
RAW_CHARS = 2000  # of a rejected event kept in quarantine

# (column, Arrow/Spark type name) of one event row, in order.
EVENT_FIELDS: tuple[tuple[str, str], ...] = (
    ("event_no", "long"),  # index in traceEvents (from 0)
    ("kind", "string"),  # KINDS value, or `other`
    ("cat", "string"),  # the category as written
    ("name", "string"),
    ("pid", "string"),  # an int or a label ("Spans") in the trace: kept as text
    ("tid", "string"),
    ("ts_us", "double"),  # as written (µs; relative to base_time when below EPOCH_US_MIN)
    ("dur_us", "double"),
    ("device", "int"),
    ("stream", "long"),
    ("correlation", "long"),
    ("external_id", "long"),
    ("call_stack", "string"),  # args["Call stack"]: `file(line): function;...`, innermost first
    ("bytes", "long"),  # memcpy/memset bytes
    ("occupancy_pct", "double"),  # args["est. achieved occupancy %"] of a kernel
    ("blocks_per_sm", "double"),
    ("registers", "int"),  # registers per thread
    ("sync_kind", "string"),  # cuda_sync_kind of a cuda_sync event
)
EVENT_COLUMNS = tuple(name for name, _ in EVENT_FIELDS)


@dataclass
class TraceMeta:
    """What a trace says about itself at the top level (all optional in real traces)."""

    is_object: bool = False
    has_events: bool = False
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    device_name: str | None = None
    compute_major: int | None = None
    compute_minor: int | None = None
    device_mem_bytes: int | None = None
    base_time_ns: int | None = None
    host: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # other small top-level scalars, for bronze


@dataclass(frozen=True)
class Reject:
    """One event that could not be read, with its index, raw text and why."""

    event_no: int
    raw: str
    reason: str


_META_KEYS = ("distributedInfo", "deviceProperties", "baseTimeNanoseconds", "host_name", "hostname")


def read_trace_meta(stream: BinaryIO) -> TraceMeta:
    """The trace's top-level facts. Raises ValueError when the stream is not a JSON object with
    `traceEvents` (truncated, not JSON, another JSON document)."""
    meta = TraceMeta()
    values: dict[str, Any] = {}
    builder: ijson.ObjectBuilder | None = None
    key = ""
    try:
        for prefix, event, value in ijson.parse(stream, use_float=True):
            if prefix == "":
                if event == "start_map":
                    meta.is_object = True
                elif event in ("start_array", "string", "number", "boolean", "null"):
                    raise ValueError("not a trace: the JSON document is not an object")
                continue
            if prefix == "traceEvents" and event == "start_array":
                meta.has_events = True
            if prefix.startswith("traceEvents"):
                continue
            top = prefix.split(".", 1)[0]
            if builder is None:
                key, builder = top, ijson.ObjectBuilder()
            builder.event(event, value)
            if prefix == top and event not in ("start_map", "start_array", "map_key"):
                values[key], builder = builder.value, None
    except ijson.JSONError as exc:
        raise ValueError(f"not readable JSON ({_short(exc)})") from exc
    if not meta.is_object or not meta.has_events:
        raise ValueError("not a trace: no traceEvents array")
    _fill_meta(meta, values)
    return meta


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def _int(value: Any) -> int | None:
    """An int from a trace value (`"2560"`, `2560`, `2560.0`); None when it is not one."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"-?\d+", text):
            return int(text)
        if re.fullmatch(r"0x[0-9a-fA-F]+", text):
            return int(text, 16)
    return None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    return None


def _fill_meta(meta: TraceMeta, values: dict[str, Any]) -> None:
    dist = values.get("distributedInfo")
    if isinstance(dist, dict):
        meta.rank, meta.world_size = _int(dist.get("rank")), _int(dist.get("world_size"))
        meta.backend = dist.get("backend") if isinstance(dist.get("backend"), str) else None
    props = values.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict):
        first = props[0]
        meta.device_name = first.get("name") if isinstance(first.get("name"), str) else None
        meta.compute_major, meta.compute_minor = (
            _int(first.get("computeMajor")),
            _int(first.get("computeMinor")),
        )
        meta.device_mem_bytes = _int(first.get("totalGlobalMem"))
    meta.base_time_ns = _int(values.get("baseTimeNanoseconds"))
    host = values.get("host_name") or values.get("hostname")
    meta.host = host if isinstance(host, str) and host else None
    meta.extra = {
        k: v
        for k, v in values.items()
        if k not in _META_KEYS and isinstance(v, str | int | float) and k != "INFO"
    }


def _event_row(no: int, e: dict[str, Any]) -> tuple[Any, ...] | str:
    """The typed row of one complete event, or the reason it cannot be read."""
    ts, dur = _float(e.get("ts")), _float(e.get("dur"))
    if ts is None:
        return "complete event without a numeric ts"
    if dur is None:
        return "complete event without a numeric dur"
    if dur < 0:
        return f"negative dur {dur}"
    name, cat = e.get("name"), e.get("cat")
    if not isinstance(name, str):
        return "event without a name"
    if not isinstance(cat, str):
        return "event without a category"
    args = e.get("args")
    args = args if isinstance(args, dict) else {}
    stack = args.get("Call stack")
    return (
        no,
        KINDS.get(cat.lower(), "other"),
        cat,
        name,
        None if e.get("pid") is None else str(e.get("pid")),
        None if e.get("tid") is None else str(e.get("tid")),
        ts,
        dur,
        _int(args.get("device", args.get("Device"))),
        _int(args.get("stream")),
        _int(args.get("correlation")),
        _int(args.get("External id", args.get("external id"))),
        stack if isinstance(stack, str) and stack else None,
        _int(args.get("bytes")) if args.get("bytes") is not None else _int(args.get("size")),
        _float(args.get("est. achieved occupancy %")),
        _float(args.get("blocks per SM")),
        _int(args.get("registers per thread")),
        args.get("cuda_sync_kind") if isinstance(args.get("cuda_sync_kind"), str) else None,
    )


@dataclass
class EventTally:
    """What the events pass saw: rows kept, other phases counted, whether the legacy categories appear."""

    kept: int = 0
    rejected: int = 0
    skipped_phases: dict[str, int] = field(default_factory=dict)
    legacy: bool = False
    has_stacks: bool = False
    has_python: bool = False
    has_steps: bool = False  # a `ProfilerStep#N` event: torch.profiler's step markers
    min_ts_us: float | None = None
    max_end_us: float | None = None
    pids: dict[str, int] = field(default_factory=dict)  # host-side pid -> events


def read_trace_events(stream: BinaryIO, tally: EventTally) -> Iterator[tuple[Any, ...] | Reject]:
    """Each event of `traceEvents` in order: a typed row (EVENT_FIELDS) or a Reject; fills `tally`."""
    for no, e in enumerate(ijson.items(stream, "traceEvents.item", use_float=True)):
        if not isinstance(e, dict):
            tally.rejected += 1
            yield Reject(no, json.dumps(e, default=str)[:RAW_CHARS], "event is not a JSON object")
            continue
        ph = e.get("ph")
        if ph != "X":
            label = ph if isinstance(ph, str) else "missing"
            tally.skipped_phases[label] = tally.skipped_phases.get(label, 0) + 1
            continue
        row = _event_row(no, e)
        if isinstance(row, str):
            tally.rejected += 1
            yield Reject(no, json.dumps(e, default=str)[:RAW_CHARS], row)
            continue
        tally.kept += 1
        kind, cat, ts, dur = row[1], row[2], row[6], row[7]
        tally.legacy = tally.legacy or cat in LEGACY_CATS
        tally.has_stacks = tally.has_stacks or row[12] is not None
        tally.has_python = tally.has_python or kind == "python_function"
        tally.has_steps = tally.has_steps or (isinstance(row[3], str) and row[3].startswith("ProfilerStep#"))
        if kind not in NOT_HOST_KINDS:
            tally.min_ts_us = ts if tally.min_ts_us is None else min(tally.min_ts_us, ts)
            tally.max_end_us = ts + dur if tally.max_end_us is None else max(tally.max_end_us, ts + dur)
            pid = row[4]
            if pid is not None:
                tally.pids[pid] = tally.pids.get(pid, 0) + 1
        yield row


def epoch_us(ts_us: float, base_time_ns: int | None) -> float | None:
    """A trace timestamp as µs since the epoch: as written when it is one, else offset by baseTimeNanoseconds;
    None when the trace gives no way to place it in time."""
    if ts_us >= EPOCH_US_MIN:
        return ts_us
    if base_time_ns is not None:
        return base_time_ns / 1000 + ts_us
    return None


# ---- where a trace came from: its path --------------------------------------------------------------------

# A job id in a path: `job_123`, `jobid=123`, `slurm-123`, `slurm_job_123_4`, or a folder of digits only.
_JOB_IN_PATH = re.compile(
    r"(?i)(?:^|[\\/_.\-])(?:slurm[_-]?)?job(?:[_-]?id)?[=_\-]?(\d+(?:_\d+)?)(?=$|[\\/_.\-])"
)
_SLURM_IN_PATH = re.compile(r"(?i)(?:^|[\\/_.\-])slurm[_-](\d+(?:_\d+)?)(?=$|[\\/_.\-])")
_DIGIT_DIR = re.compile(r"(?:^|[\\/])(\d{3,})(?:_(\d+))?(?=[\\/])")
# torch.profiler.tensorboard_trace_handler names files `{hostname}_{pid}.{time_ns}.pt.trace.json[.gz]`.
_WORKER_NAME = re.compile(r"^(?P<host>[A-Za-z0-9][\w.\-]*?)_(?P<pid>\d+)\.\d+\.pt\.trace\.json(?:\.gz)?$")
_RANK_IN_NAME = re.compile(r"(?i)(?:^|[^a-z])rank[_-]?(\d+)(?:[^\d]|$)")


def job_id_in_path(path: str) -> str | None:
    """The job id a trace's path names (`/scratch/u/job_123/rank0.pt.trace.json`, `slurm-123/...`,
    `/runs/4567/...`), or None."""
    for rx in (_JOB_IN_PATH, _SLURM_IN_PATH):
        if m := rx.search(path):
            return m.group(1)
    if m := _DIGIT_DIR.search(path):
        return m.group(1) + (f"_{m.group(2)}" if m.group(2) else "")
    return None


def worker_in_name(path: str) -> tuple[str | None, int | None]:
    """(host, pid) from a tensorboard_trace_handler file name, else (None, None)."""
    base = re.split(r"[\\/]", path)[-1]
    if m := _WORKER_NAME.match(base):
        return m.group("host"), int(m.group("pid"))
    return None, None


def rank_in_name(path: str) -> int | None:
    """The rank a file name states (`rank-3.json`, `rank_0.pt.trace.json`), or None."""
    base = re.split(r"[\\/]", path)[-1]
    m = _RANK_IN_NAME.search(base)
    return int(m.group(1)) if m else None
