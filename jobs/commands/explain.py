"""`jobfit explain LOGFILE [--script SCRIPT] [--tail-kb N] [--json]`: why one job failed, from its log alone.

No warehouse and no Spark: the log's tail is read here and diagnosed by pipelines/gold/failures/explain.py
with
the tables the gold build uses, so the command starts fast at the prompt."""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path
from typing import BinaryIO

from jobs.commands import add_common
from jobs.commands.ingest import DEFAULT_TAIL_KB
from jobs.context import Context, UsageError

CHUNK_BYTES = 1 << 20
# A tail is not a log when more than this share of its bytes are NUL or other non-text control bytes (text
# has next to none; random or compressed bytes about 10 %, UTF-16 half), or of its characters undecodable.
BINARY_SHARE = 0.05
UNDECODABLE_SHARE = 0.3
_TEXT_CONTROLS = frozenset(b"\t\n\r\f\v\x1b\x08")


def register(sub: argparse._SubParsersAction) -> None:
    """Add `jobfit explain` to the command parser."""
    p = sub.add_parser(
        "explain",
        help="why one job failed, from its log file alone (no warehouse, no Spark)",
        description="Diagnose one job log (a slurm-1234.out, a .err file, or - for stdin): the cause, the "
        "exception that ended the run, the user's own code line it died at, the evidence and a fix that "
        "names "
        "that line (and the job script's line that sets what the fix turns, with --script). Reads the log's "
        "last --tail-kb KiB, as `jobfit ingest logs` keeps for the gold build, and applies the same tables.",
    )
    p.add_argument("log", metavar="LOGFILE", help="the job's stdout/stderr file, or - to read stdin")
    p.add_argument("--script", metavar="SCRIPT", help="the job script, to name the line a fix changes")
    p.add_argument(
        "--tail-kb",
        type=int,
        default=DEFAULT_TAIL_KB,
        metavar="N",
        help=f"read the last N KiB of the log (default {DEFAULT_TAIL_KB}, as `jobfit ingest logs`)",
    )
    add_common(p, cluster=False)
    p.set_defaults(func=run)


def _tail_of(stream: BinaryIO, tail_bytes: int) -> tuple[bytes, bool]:
    """The last `tail_bytes` of a stream read to its end in chunks (bounded memory); whether it was cut."""
    kept = b""
    cut = False
    while chunk := stream.read(CHUNK_BYTES):
        kept += chunk
        if len(kept) > tail_bytes:
            kept, cut = kept[-tail_bytes:], True
    return kept, cut


def read_log_tail(name: str, tail_bytes: int) -> str:
    """The log's last `tail_bytes` as text from a line start; UsageError (one line) when it cannot be read or
    is not text. Undecodable bytes become U+FFFD: a log in another encoding is still diagnosed."""
    try:
        if name == "-":
            data, cut = _tail_of(sys.stdin.buffer, tail_bytes)
        else:
            path = Path(name)
            if path.is_dir():
                raise UsageError(f"explain: {name} is a directory, not a log file")
            if path.suffix == ".gz":  # as `jobfit ingest logs` reads them; streamed, a gzip cannot seek
                with gzip.open(path, "rb") as f:
                    data, cut = _tail_of(f, tail_bytes)
            else:
                with path.open("rb") as f:
                    size = f.seek(0, 2)
                    f.seek(max(0, size - tail_bytes))
                    data, cut = f.read(), size > tail_bytes
    except FileNotFoundError:
        raise UsageError(f"explain: no such file: {name}") from None
    except (gzip.BadGzipFile, EOFError) as exc:
        raise UsageError(f"explain: {name} is not a readable gzip file: {exc}") from None
    except OSError as exc:
        raise UsageError(f"explain: cannot read {name}: {exc.strerror or exc}") from None
    if cut:
        newline = data.find(b"\n")
        data = data[newline + 1 :] if newline >= 0 else data
    sample = data[:CHUNK_BYTES]
    odd = sum(1 for b in sample if b < 32 and b not in _TEXT_CONTROLS)
    text = data.replace(b"\x00", b"").decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    if (sample and odd > BINARY_SHARE * len(sample)) or (text and bad > UNDECODABLE_SHARE * len(text)):
        raise UsageError(f"explain: {name} is not a text log ({odd} control bytes, {bad} undecodable)")
    return text


def run(ctx: Context, args: argparse.Namespace) -> int:
    """Read the log's tail (and the script), diagnose it, print the result."""
    from pipelines.gold.failures.explain import explain_log

    if args.tail_kb < 1:
        raise UsageError(f"explain: --tail-kb must be at least 1, got {args.tail_kb}")
    text = read_log_tail(args.log, args.tail_kb * 1024)
    script = read_log_tail(args.script, 1 << 20) if args.script else None
    result = explain_log(text, script)
    ctx.emit(result.as_json(), as_json=args.json, text=_text(result.as_json()))
    return 0


def _text(d: dict) -> str:
    """The human reading of an explanation."""
    blame = "fixable by the user" if d["user_fixable"] else "not the user's fault"
    lines = [f"{d['cause']} ({d['title']}; {blame}; confidence {d['confidence']:.2f})"]
    if d["exception"]:
        e = d["exception"]
        lines.append(f"  exception: {e['type']}" + (f": {e['message']}" if e["message"] else ""))
    if d["code"]:
        c = d["code"]
        lines.append(f"  your code: {c['file']}:{c['line']} in {c['function']}")
        if c["text"]:
            lines.append(f"      {c['text']}")
    lines.append(f"  fix: {d['suggested_fix']}")
    lines.append(f"  evidence: {d['evidence']}")
    return "\n".join(lines)
