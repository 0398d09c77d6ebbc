"""Deliberately malformed records, inserted into written files and listed in bad_records.jsonl."""

from __future__ import annotations

import json
import random
from pathlib import Path

KINDS = {
    "sacct": ("truncated_line", "binary_junk"),
    "dcgm": ("unclosed_labels", "non_numeric_value", "missing_value"),
    "k8s": ("truncated_json", "missing_metadata"),
}


def _bad_sacct(kind: str, lines: list[str], rng: random.Random) -> str:
    if kind == "truncated_line":
        row = rng.choice([ln for ln in lines[1:] if "." not in ln.split("|", 1)[0]] or lines[1:])
        fields = row.split("|")
        return "|".join(fields[: rng.randint(3, max(4, len(fields) // 2))])
    return "\x00\x00\x1b[0m\ufffd\ufffdPK\x03\x04 sacct: error: Unable to connect to slurmdbd"


def _bad_dcgm(kind: str, lines: list[str], rng: random.Random) -> str:
    sample = rng.choice([ln for ln in lines if ln.startswith("DCGM_FI_")])
    head, _, rest = sample.partition("} ")
    if kind == "unclosed_labels":
        return head[: max(20, len(head) * 2 // 3)]
    if kind == "non_numeric_value":
        return f"{head}}} N/A {rest.split(' ')[-1]}"
    return head + "}"


def _bad_k8s(kind: str, lines: list[str], rng: random.Random) -> str:
    line = rng.choice(lines)
    if kind == "truncated_json":
        return line[: len(line) * 3 // 5]
    pod = json.loads(line)
    pod.pop("metadata")
    return json.dumps(pod, separators=(",", ":"))


MAKERS = {"sacct": _bad_sacct, "dcgm": _bad_dcgm, "k8s": _bad_k8s}


def inject(out: Path, count: int, seed: int) -> list[dict]:
    """Insert `count` bad records spread over sacct, dcgm and k8s files; returns the manifest rows."""
    rng = random.Random(seed * 31 + 7)
    files = {
        "sacct": sorted(
            p for p in (out / "sacct").glob("*.txt") if p.read_text(encoding="utf-8").count("\n") > 1
        ),
        "dcgm": sorted((out / "dcgm").glob("*.prom")),
        "k8s": sorted((out / "k8s").glob("*.jsonl")),
    }
    sources = [s for s, fs in files.items() if fs]
    plan: dict[Path, list[tuple[str, str]]] = {}
    for i in range(count):
        source = sources[i % len(sources)]
        path = rng.choice(files[source])
        plan.setdefault(path, []).append((source, KINDS[source][(i // len(sources)) % len(KINDS[source])]))
    manifest = []
    for path in sorted(plan):
        lines = path.read_text(encoding="utf-8").splitlines()
        inserts = []
        for source, kind in plan[path]:
            first = 1 if source == "sacct" else 0  # never before the sacct header
            pos = rng.randint(first, len(lines))
            inserts.append((pos, source, kind, MAKERS[source](kind, lines, rng)))
        inserts.sort(key=lambda x: x[0])
        new: list[str] = []
        cursor = 0
        for pos, source, kind, raw in inserts:
            new.extend(lines[cursor:pos])
            cursor = pos
            new.append(raw)
            manifest.append(
                {
                    "source": source,
                    "file": str(path.relative_to(out)),
                    "line_no": len(new),
                    "kind": kind,
                    "raw": raw,
                }
            )
        new.extend(lines[cursor:])
        path.write_text("\n".join(new) + "\n", encoding="utf-8", newline="\n")
    manifest.sort(key=lambda m: (m["file"], m["line_no"]))
    with (out / "bad_records.jsonl").open("w", encoding="utf-8") as fh:
        for row in manifest:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return manifest
