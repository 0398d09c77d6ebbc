"""Log file names: which job and stream a stderr/stdout file holds."""

from __future__ import annotations

import re

# `[PREFIX-]JOBID[_TASK].(err|out|log|txt)[.gz]`: slurm-123.out, 123.err, 123_7.err, train-123_7.out.
LOG_NAME_RE = re.compile(r"^(?:.*-)?(\d+(?:_\d+)?)\.(err|out|log|txt|stderr|stdout)(?:\.gz)?$")
_STREAMS = {
    "err": "stderr",
    "stderr": "stderr",
    "out": "stdout",
    "stdout": "stdout",
    "log": "log",
    "txt": "log",
}


def parse_log_file_name(name: str) -> tuple[str, str]:
    """(job_id, stream) from a log file's base name; ValueError naming the file when it names no job id."""
    match = LOG_NAME_RE.match(name.rsplit("/", 1)[-1])
    if not match:
        raise ValueError(
            f"file name {name!r} does not name a job id (expected [PREFIX-]JOBID[_TASK].err|.out|.log)"
        )
    return match.group(1), _STREAMS[match.group(2)]
