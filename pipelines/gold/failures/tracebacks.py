"""Reading Python tracebacks as job logs really hold them: the exception that ended the run, the user's frame.

Pure Python, no Spark: `jobfit explain` calls `read_tracebacks` at the prompt and the gold build applies the
same function to each job's log tail. What counts as a prefix, a marker or library code is data in the tables
below; docs/failures.md says what is read and where it stops.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pipelines.gold.failures.patterns import EVIDENCE_CHARS

# ---- what a log line may carry in front of a traceback line ------------------------------------------------

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Z0-9]")
# Prefixes stripped from the front of a line, in this order, repeatedly (a timestamp, then a rank tag, ...).
LINE_PREFIXES: tuple[tuple[str, str], ...] = (
    ("syslog_time", r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d "),
    ("iso_time", r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)? "),
    ("quote", r"> ?"),
    ("pasted_line_no", r" *\d{1,6} ?[|│] ?"),
)
# A tag naming the process that wrote the line; lines with the same tag form one stream. Searched for (a
# tqdm bar may stand glued in front of it); group 1 is the stream name.
RANK_TAG_RE = re.compile(
    r"\[((?:rank|default)\d+)\]: ?"  # torch.distributed / torchrun --tee
    r"|\[(\d+,\d+)\]<std(?:out|err)>: ?"  # mpirun --tag-output
    r"|^ *(\d{1,5}): "  # srun --label
)
_PREFIX_RES = tuple(re.compile(p) for _, p in LINE_PREFIXES)
# A tqdm bar left on the line in front of what comes next (no newline after the last redraw).
TQDM_GLUE_RE = re.compile(r"^[^|\n]*?\d{1,3}%\|[^|]*\|[^\[\n]*\[[^\]]*\]")

# ---- the pieces of a traceback -----------------------------------------------------------------------------

HEADER_RE = re.compile(r"Traceback \(most recent call last\):")
FRAME_RE = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<function>.+?))?\s*(?:\*{1,2})?\s*$'
)
# A frame line cut by the terminal width, to be joined with the next line when that one starts at column 0
# (a wrapped remainder; a source line is indented). Cut inside the quoted path, or after it.
PARTIAL_FRAME_RE = re.compile(r'^\s*File "(?:(?P<path>[^"]*)|[^"]+",?(?: line(?: \d+)?,?(?: in)?)?)\s*$')
CARET_RE = re.compile(r"^\s*[~^]+\s*$")
ELISION_RE = re.compile(r"^\s*\.\.\.<\d+ lines?>\.\.\.\s*$")
# An exception line: a dotted name whose last part is a class (capitalised), then ": message" or nothing.
EXCEPTION_RE = re.compile(r"^(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Z]\w*)(?::\s?(?P<message>.*))?$")
EXCEPTION_SUFFIX_RE = re.compile(r"(?:Error|Exception|Exit|Interrupt|Iteration|Warning|Failure|Fault)$")

# Lines that say what the next traceback is. The kind decides how it is read.
MARKERS: tuple[tuple[str, str], ...] = (
    ("chained", r"During handling of the above exception, another exception occurred:"),
    ("chained", r"The above exception was the direct cause of the following exception:"),
    ("nonfatal", r"^Exception ignored (?:in|on|while)\b"),
    ("nonfatal", r"^--- Logging error ---$"),
    ("nonfatal", r"^Call stack:$"),  # the logging error's own stack, printed after its traceback
    ("embedded", r"^-- Process \d+ terminated with the following error:"),  # torch.multiprocessing.spawn
)
_MARKER_RES = tuple((kind, re.compile(p)) for kind, p in MARKERS)
# The text in front of a traceback header that makes it a quoted copy inside the previous exception's message.
EMBEDDED_HEADER_PREFIXES = (
    "Original",
)  # "Original Traceback (…)": DataLoader workers, DataParallel replicas
KERAS_USER_CODE_RE = re.compile(r"\bin user code:\s*$")  # Keras/TensorFlow: the frames follow, indented

# Launchers whose own traceback only reports that a worker failed: the worker's traceback is the story.
LAUNCHER_EXCEPTIONS = ("ChildFailedError",)
ROOT_CAUSE_RE = re.compile(r"Root Cause \(first observed failure\):")
SUMMARY_FIELD_RE = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
CPP_TERMINATE_RE = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']+)'")
CPP_WHAT_RE = re.compile(r"^\s*what\(\):\s+(?P<message>.*)$")
DEVICE_ASSERT_RE = re.compile(
    r"(?<!\S)(?P<file>\S+?\.cuh?):(?P<line>\d+): (?:(?P<kernel>.{0,300}?): )?"
    r"block: \[[\d,]+\], thread: \[[\d,]+\] "
    r"Assertion `(?P<condition>.+)` failed"
)

# ---- whose code a frame is ---------------------------------------------------------------------------------

# Path rules, first match wins; a path none of them matches is the user's own code.
NOT_USER_PATHS: tuple[tuple[str, str], ...] = (
    ("not a file", r"^<[^>]*>$"),  # <frozen runpy>, <string>, <stdin>, <decorator-gen-12>
    ("generated code", r"__autograph_generated_file"),  # TensorFlow's AutoGraph copies of user functions
    ("installed package", r"[\\/](?:site|dist)-packages[\\/]"),
    (
        "standard library",
        r"(?i)[\\/]lib(?:64)?[\\/]python\d(?:\.\d+)?[\\/]",
    ),  # any prefix: conda, pyenv, /usr
    ("standard library", r"(?i)[\\/]python\d*[\\/]lib[\\/]"),  # Windows: ...\Python311\Lib\threading.py
    ("standard library", r"(?i)python\d+\.zip[\\/]"),
    ("console script", r"[\\/]bin[\\/][^\\/.]+$"),  # pip's entry-point wrappers: .../envs/x/bin/torchrun
)
# A library copied into a project folder keeps its own layout: `<package>/<one of its own folders>/`.
LIBRARY_LAYOUTS: tuple[tuple[str, str], ...] = (
    (
        "torch",
        r"torch[\\/](?:nn|distributed|utils|autograd|cuda|multiprocessing|amp|optim|_dynamo|_inductor|fx|jit|"
        r"backends|_tensor\.py|tensor\.py|_utils\.py|serialization\.py|functional\.py|_ops\.py)",
    ),
    (
        "transformers",
        r"transformers[\\/](?:models|generation|pipelines|integrations|utils|data|[a-z_]+_utils\.py|trainer\.py)",
    ),
    ("deepspeed", r"deepspeed[\\/](?:runtime|launcher|comm|ops|utils|inference|moe|checkpoint)"),
    ("accelerate", r"accelerate[\\/](?:utils|commands|accelerator\.py|data_loader\.py|state\.py)"),
    (
        "lightning",
        r"(?:pytorch_lightning|lightning[\\/]pytorch|lightning[\\/]fabric)[\\/](?:trainer|core|strategies|loops|callbacks|plugins|utilities|connectors)",
    ),
    ("megatron", r"megatron[\\/](?:core|training|legacy)[\\/]"),
    ("tensorflow", r"tensorflow[\\/](?:python|core|compiler)[\\/]"),
    ("keras", r"keras[\\/](?:src[\\/])?(?:engine|layers|utils|backend|trainers|models|optimizers)[\\/]"),
    ("jax", r"jax[\\/]_src[\\/]"),
    ("numpy", r"numpy[\\/](?:_?core|lib|linalg|random)[\\/]"),
    ("peft", r"peft[\\/](?:tuners|utils|peft_model\.py)"),
    ("apex", r"apex[\\/](?:amp|parallel|optimizers|normalization|transformer)[\\/]"),
    ("vllm", r"vllm[\\/](?:engine|worker|executor|model_executor|entrypoints|v1)[\\/]"),
    ("fairseq", r"fairseq[\\/](?:tasks|models|distributed|trainer\.py|data)"),
    ("hydra", r"hydra[\\/]_internal[\\/]"),
)
_NOT_USER_RES = tuple((why, re.compile(p)) for why, p in NOT_USER_PATHS)
_LAYOUT_RES = tuple((name, re.compile(r"(?:^|[\\/])" + p)) for name, p in LIBRARY_LAYOUTS)


def frame_owner(path: str) -> str:
    """Whose code a frame's file is: 'user', or why not ('installed package', 'standard library',
    'library torch', ...)."""
    for why, rx in _NOT_USER_RES:
        if rx.search(path):
            return why
    for name, rx in _LAYOUT_RES:
        if rx.search(path):
            return f"library {name}"
    return "user"


# ---- results -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    """One `File "…", line N, in f` entry and the source line printed under it ('' when none)."""

    file: str
    line: int
    function: str
    text: str


@dataclass
class Traceback:
    """One traceback as printed: frames outermost first, its exception, how it relates to the others."""

    stream: str | None
    frames: list[Frame] = field(default_factory=list)
    exc_type: str | None = None
    message: str = ""
    kind: str = "plain"  # plain | chained | nonfatal | embedded | keras
    outer: Traceback | None = None  # for an embedded copy: the exception whose message quotes it
    superseded: bool = False  # a later exception was raised while handling this one
    garbled: bool = False  # the exception line was interleaved with another process's output
    frame_indent: int = -1
    tail: list[str] = field(default_factory=list)  # lines after the last frame, for an interleaved ending


@dataclass(frozen=True)
class LauncherSummary:
    """torchrun's ChildFailedError summary: the root-cause rank, its exit code and host, and its traceback
    when the worker recorded one (`@record`)."""

    rank: int | None
    exitcode: int | None
    host: str | None
    time: str | None
    has_traceback: bool


@dataclass(frozen=True)
class DeviceAssert:
    """A CUDA kernel assertion (`…Loss.cu:250: kernel: block: […], thread: […] Assertion `cond` failed.`)."""

    file: str
    line: int
    kernel: str
    condition: str


@dataclass(frozen=True)
class TracebackReading:
    """What a log's tracebacks say: the run-ending exception, the user's innermost frame, and the context."""

    exc_type: str | None
    message: str
    code: Frame | None
    frames: tuple[Frame, ...]
    tracebacks: int  # how many tracebacks were read, fatal or not
    stream: str | None  # the rank whose traceback was chosen
    garbled: bool
    launcher: LauncherSummary | None
    cpp_exception: tuple[str, str] | None  # (C++ type, what()) of `terminate called after throwing`
    device_assert: DeviceAssert | None

    def exception_json(self) -> dict[str, str] | None:
        """{"type", "message"} of the run-ending exception, or None when the log shows none."""
        if self.exc_type is None:
            return None
        return {"type": self.exc_type, "message": self.message[:EVIDENCE_CHARS]}

    def code_json(self) -> dict[str, str | int] | None:
        """{"file", "line", "function", "text"} of the user's frame, or None when no frame is theirs."""
        if self.code is None:
            return None
        c = self.code
        return {"file": c.file, "line": c.line, "function": c.function, "text": c.text}


# ---- reading -----------------------------------------------------------------------------------------------


def clean_line(raw: str) -> tuple[str | None, str]:
    """(stream, text) of one log line: ANSI codes and carriage-return overwrites resolved, timestamps,
    quotes and a rank tag taken off the front (the tag names the stream)."""
    line = ANSI_RE.sub("", raw)
    if "\r" in line:
        # a progress bar redraws with \r: what stays on screen is the last piece that holds text
        pieces = [p for p in line.split("\r") if p.strip()]
        line = pieces[-1] if pieces else ""
    bar = TQDM_GLUE_RE.match(line)
    if bar and line[bar.end() :].strip():
        line = line[bar.end() :]
    stream = None
    changed = True
    while changed:
        changed = False
        for rx in _PREFIX_RES:
            m = rx.match(line)
            if m and m.end() > 0:
                line, changed = line[m.end() :], True
        tag = RANK_TAG_RE.search(line)
        if tag and (tag.start() == 0 or _glued_tag(line, tag.start())):
            stream = next(g for g in tag.groups() if g is not None)
            stream = stream if not stream.isdigit() else f"task{stream}"
            line, changed = line[tag.end() :], True
    return stream, line


def _glued_tag(line: str, start: int) -> bool:
    """Whether a rank tag in mid-line follows a progress bar or log noise glued in front of a traceback."""
    rest = line[start:]
    return bool(HEADER_RE.search(rest)) and not HEADER_RE.search(line[:start])


def _joined_lines(text: str) -> list[tuple[str | None, str]]:
    """Cleaned (stream, text) lines with frame lines that the terminal wrapped joined back together."""
    out: list[tuple[str | None, str]] = []
    pending: dict[str | None, int] = {}  # stream -> index of a cut frame line waiting for its rest
    for raw in text.splitlines():
        stream, line = clean_line(raw)
        if stream is None and len(pending) == 1 and line[:1].strip():
            stream = next(iter(pending))  # a wrapped remainder carries no tag of its own
        if stream in pending:
            i = pending.pop(stream)
            if line and not line[0].isspace():
                cut = PARTIAL_FRAME_RE.match(out[i][1])
                inside_path = cut is not None and cut.group("path") is not None
                out[i] = (stream, out[i][1] + ("" if inside_path else " ") + line)
                if PARTIAL_FRAME_RE.match(out[i][1]):
                    pending[stream] = i
                continue
        out.append((stream, line))
        if PARTIAL_FRAME_RE.match(line):
            pending[stream] = len(out) - 1
    return out


def _indent(line: str) -> int:
    """How many spaces or tabs the line starts with."""
    return len(line) - len(line.lstrip(" \t"))


def _is_exception_line(text: str) -> re.Match[str] | None:
    """The EXCEPTION_RE match when the text is an exception line (a class-like name, or a dotted one with
    a message), else None."""
    m = EXCEPTION_RE.match(text)
    if not m:
        return None
    name = m.group("type").rsplit(".", 1)[-1]
    dotted = "." in m.group("type")
    if EXCEPTION_SUFFIX_RE.search(name) or (dotted and m.group("message") is not None):
        return m
    return None


class _Reader:
    """The line-by-line state of reading one log (per stream: the open traceback, the last exception)."""

    def __init__(self) -> None:
        self.tracebacks: list[Traceback] = []
        self.open: dict[str | None, Traceback] = {}
        self.last_raised: dict[str | None, Traceback] = {}
        self.marker: dict[str | None, tuple[str, int]] = {}
        self.summary_fields: dict[str, str] | None = None
        self.summary_tb = False
        self.summary: LauncherSummary | None = None
        self.cpp: tuple[str, str] | None = None
        self.cpp_pending: str | None = None
        self.device_assert: DeviceAssert | None = None
        self.n = 0

    def feed(self, stream: str | None, line: str) -> None:
        """Read one cleaned line."""
        self.n += 1
        stripped = line.strip()
        if self._context_line(stripped):
            return
        for kind, rx in _MARKER_RES:
            if rx.search(stripped):
                self.marker[stream] = (kind, self.n)
                self._close(stream)
                return
        header = HEADER_RE.search(line)
        if header:
            self._start(stream, line[: header.start()])
            return
        frame = FRAME_RE.search(line)
        if frame:
            tb = self.open.get(stream)
            if tb is None:
                tb = self._start(stream, "", headerless=True)
            if tb.frame_indent < 0:
                tb.frame_indent = _indent(line)
            function = (frame.group("function") or "?").strip()
            tb.frames.append(Frame(frame.group("file"), int(frame.group("line")), function, ""))
            tb.tail = []
            return
        tb = self.open.get(stream)
        if tb is not None:
            self._in_traceback(stream, tb, line)

    def _context_line(self, stripped: str) -> bool:
        """Lines outside tracebacks that matter: torchrun's summary, C++ terminate, CUDA kernel asserts."""
        if self.device_assert is None and "Assertion" in stripped and "thread: [" in stripped:
            m = DEVICE_ASSERT_RE.search(stripped)
            if m:
                self.device_assert = DeviceAssert(
                    m.group("file"),
                    int(m.group("line")),
                    (m.group("kernel") or "").strip(),
                    m.group("condition"),
                )
                return True
        m = CPP_TERMINATE_RE.search(stripped)
        if m:
            self.cpp_pending = m.group("type")
            return True
        if self.cpp_pending is not None:
            what = CPP_WHAT_RE.match(stripped)
            self.cpp = (self.cpp_pending, what.group("message").strip() if what else "")
            self.cpp_pending = None
            if what:
                return True
        if ROOT_CAUSE_RE.search(stripped):
            self.summary_fields = {}
            return True
        if self.summary_fields is not None:
            f = SUMMARY_FIELD_RE.match(stripped)
            if f:
                self.summary_fields[f.group(1)] = f.group(2).strip()
                if f.group(1) == "traceback":
                    self.summary_tb = bool(HEADER_RE.search(f.group(2)))
                    self._finish_summary()
                    return not self.summary_tb
                return True
            if stripped.startswith("====") or stripped.startswith("----"):
                self._finish_summary()
        return False

    def _finish_summary(self) -> None:
        """Close torchrun's Root Cause block into a LauncherSummary."""
        f = self.summary_fields or {}
        rank = re.match(r"(\d+)", f.get("rank", ""))
        code = re.match(r"(-?\d+)", f.get("exitcode", ""))
        self.summary = LauncherSummary(
            int(rank.group(1)) if rank else None,
            int(code.group(1)) if code else None,
            f.get("host"),
            f.get("time"),
            self.summary_tb,
        )
        self.summary_fields = None

    def _start(self, stream: str | None, before: str, headerless: bool = False) -> Traceback:
        """Open a traceback on a header (or on a frame with no header), saying how it relates to others."""
        tb = Traceback(stream)
        marker = self.marker.pop(stream, None)
        raised = self.last_raised.get(stream)
        recent = marker is not None and self.n - marker[1] <= 3
        quoted = not headerless and before.rstrip().endswith(EMBEDDED_HEADER_PREFIXES)
        if raised is not None and (quoted or (recent and marker is not None and marker[0] == "embedded")):
            tb.kind, tb.outer = "embedded", raised
        elif headerless and raised is not None and raised.kind == "keras_pending":
            tb.kind, tb.outer = "embedded", raised
            raised.kind = "plain"
        elif recent and marker is not None and marker[0] == "chained":
            tb.kind = "chained"
            if raised is not None:
                raised.superseded = True
        elif recent and marker is not None and marker[0] == "nonfatal":
            tb.kind = "nonfatal"
        self.open[stream] = tb
        self.tracebacks.append(tb)
        return tb

    def _close(self, stream: str | None) -> None:
        """No traceback is open on the stream any more."""
        self.open.pop(stream, None)

    def _in_traceback(self, stream: str | None, tb: Traceback, line: str) -> None:
        """A line inside an open traceback: source text, carets, elisions, the exception, or noise."""
        stripped = line.strip()
        if not stripped or CARET_RE.match(line) or ELISION_RE.match(line):
            return
        if not tb.frames:
            return  # a header followed by noise (another process writing): wait for frames
        indent = _indent(line)
        exc = _is_exception_line(stripped) if indent <= max(tb.frame_indent, 0) else None
        if exc:
            tb.exc_type, tb.message = exc.group("type"), (exc.group("message") or "").strip()
            self.last_raised[stream] = tb
            if KERAS_USER_CODE_RE.search(tb.message):
                tb.kind = "keras_pending" if tb.kind == "plain" else tb.kind
            self._close(stream)
            return
        last = tb.frames[-1]
        if indent > tb.frame_indent and not last.text and not tb.tail:
            tb.frames[-1] = Frame(last.file, last.line, last.function, stripped)
            return
        tb.tail.append(stripped)


def _recover_garbled(tb: Traceback) -> None:
    """Rebuild `module.Class` of an exception line two processes wrote at once: Python writes the module,
    '.', the class and ': message' separately, so the other process's pieces (its copy of the same source
    lines) are taken out first."""
    sources = sorted({f.text for f in tb.frames if len(f.text) >= 8}, key=len, reverse=True)
    pieces = []
    for line in tb.tail:
        for s in sources:
            line = line.replace(s, "")
        pieces.append(line.strip())
    joined = "".join(pieces)
    m = re.match(
        r"(?P<type>(?:[a-z_][a-z0-9_]*\.)*[A-Z][A-Za-z0-9]*?(?:Error|Exception|Interrupt|Exit))", joined
    )
    if m:
        tb.exc_type, tb.garbled = m.group("type"), True
        rest = [p for p in tb.tail if p.startswith(":")]
        tb.message = rest[-1].lstrip(": ").strip() if rest else ""


def _is_launcher(tb: Traceback) -> bool:
    """Whether the traceback is a launcher's report of a failed worker (torchrun's ChildFailedError)."""
    return bool(tb.exc_type) and tb.exc_type.rsplit(".", 1)[-1] in LAUNCHER_EXCEPTIONS


def _run_ending(tracebacks: list[Traceback], summary: LauncherSummary | None) -> Traceback | None:
    """The traceback of the exception that ended the run (see docs/failures.md for the order of choice)."""
    tops = [
        t
        for t in tracebacks
        if t.kind not in ("nonfatal", "embedded") and not t.superseded and (t.frames or t.exc_type)
    ]
    workers = [t for t in tops if not _is_launcher(t)] or tops
    if not workers:
        return None
    if summary is not None and summary.rank is not None:
        named = [t for t in workers if t.stream in (f"rank{summary.rank}", f"default{summary.rank}")]
        if named:
            return named[0]
    ranked = [t for t in workers if t.stream is not None]
    return ranked[0] if ranked else workers[-1]


def _user_frame(frames: list[Frame]) -> Frame | None:
    """The innermost frame whose file is the user's own code."""
    return next((f for f in reversed(frames) if frame_owner(f.file) == "user"), None)


def read_tracebacks(text: str | None) -> TracebackReading:
    """Read every traceback in a log's text; pick the run-ending exception and the user's innermost frame."""
    reader = _Reader()
    for stream, line in _joined_lines(text or ""):
        reader.feed(stream, line)
    if reader.summary_fields is not None:
        reader._finish_summary()
    for tb in reader.tracebacks:
        if tb.exc_type is None and tb.tail:
            _recover_garbled(tb)
    chosen = _run_ending(reader.tracebacks, reader.summary)
    frames: list[Frame] = []
    exc_type, message, garbled = None, "", False
    if chosen is not None:
        frames = list(chosen.frames)
        exc_type, message, garbled = chosen.exc_type, chosen.message, chosen.garbled
        inner = chosen
        while True:
            quoted = next((t for t in reader.tracebacks if t.outer is inner), None)
            if quoted is None:
                break
            frames += quoted.frames
            if quoted.exc_type:
                exc_type, message = quoted.exc_type, quoted.message or message
            inner = quoted
    if exc_type is None and reader.cpp is not None:
        exc_type, message = reader.cpp
    return TracebackReading(
        exc_type=exc_type,
        message=message,
        code=_user_frame(frames),
        frames=tuple(frames),
        tracebacks=len([t for t in reader.tracebacks if t.frames]),
        stream=chosen.stream if chosen else None,
        garbled=garbled,
        launcher=reader.summary,
        cpp_exception=reader.cpp,
        device_assert=reader.device_assert,
    )
