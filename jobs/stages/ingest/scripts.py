"""`jobfit ingest scripts PATH... --cluster C`: job scripts into silver.scripts (by content hash) and
silver.job_scripts (job -> hash), and the hash onto the silver.jobs rows the links reach.

A file is either `sacct --batch-script` output (one or more `Batch Script for <job>` blocks) or one script
named by its job id (`12345.sh`, `12345_7.sbatch`, `12345`). A script whose file name carries no job id is
stored in silver.scripts without a job link; a job whose script sacct did not store (`NONE`) is
quarantined. Jobs already in silver.jobs get `script_hash` set here (own link, else their array's or
het job's: `pipelines.silver.script_links`); jobs ingested later take it from silver.job_scripts in
`ingest sacct`.

`--sources DIR`: a side folder of the files each job's entry points read, `DIR/<job id>/<path>` (the
training script and configs, as an archive kept them), into silver.sources (one row per sha256 of the
bytes, however many jobs share the file) and silver.job_sources (job, path -> hash). A file over 256 KiB
(the submit-time bound, features/workload.py) or not UTF-8 text is left out and counted; a folder whose name
is not a job id is skipped and counted."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import functions as F

from features.workload import MAX_SOURCE_BYTES
from jobs.context import Context, UsageError
from jobs.io.tables import merge_into, read_table, table_exists, table_path
from jobs.stages.ingest.common import IngestReport, bronze_frame, read_inputs, write_bronze, write_quarantine
from pipelines.schemas import (
    QUARANTINE,
    SILVER_JOB_SCRIPTS,
    SILVER_JOB_SOURCES,
    SILVER_JOBS,
    SILVER_SCRIPTS,
    SILVER_SOURCES,
)
from pipelines.silver.script_links import with_script_hash
from pipelines.silver.scripts import parse_script, split_batch_script_output

_JOB_ID_NAME = re.compile(r"^(\d+(?:_\d+)?(?:\+\d+)?)(?:\.(?:sh|bash|sbatch|slurm|pbs|job|savescript|txt))?$")


def job_id_from_name(path: str) -> str | None:
    """The job id a script file is named by (`12345.sh` -> `12345`, `12345_7` -> `12345_7`), else None."""
    m = _JOB_ID_NAME.match(os.path.basename(path))
    return m.group(1) if m else None


def job_sources(root: str | Path) -> tuple[list[tuple[str, str, str, bytes]], dict[str, int]]:
    """The files of a side folder of sources per job: (job id, path relative to the job's folder, sha256,
    bytes) for every regular file under `root/<job id>/`, sorted; and what was left out, counted
    (`too_large`: over MAX_SOURCE_BYTES, `not_text`: not UTF-8, `not_a_job`: a top folder or file whose name
    is not a job id)."""
    base = Path(root)
    if not base.is_dir():
        raise UsageError(f"--sources {root}: not a folder")
    found: list[tuple[str, str, str, bytes]] = []
    skipped = {"too_large": 0, "not_text": 0, "not_a_job": 0}
    for top in sorted(base.iterdir()):
        job_id = job_id_from_name(top.name) if top.is_dir() else None
        if job_id is None or job_id != top.name:
            skipped["not_a_job"] += 1
            continue
        for path in sorted(p for p in top.rglob("*") if p.is_file()):
            if path.stat().st_size > MAX_SOURCE_BYTES:
                skipped["too_large"] += 1
                continue
            data = path.read_bytes()
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                skipped["not_text"] += 1
                continue
            found.append((job_id, path.relative_to(top).as_posix(), hashlib.sha256(data).hexdigest(), data))
    return found, skipped


def _ingest_sources(ctx: Context, root: str, cluster: str, report: IngestReport) -> None:
    """The side folder into silver.sources (insert-only by hash) and silver.job_sources."""
    found, skipped = job_sources(root)
    now = ctx.now()
    texts = {sha: data for _, _, sha, data in found}
    ctx.progress(
        f"sources: {len(found)} file(s) of {len({j for j, *_ in found})} job(s), {len(texts)} distinct"
    )
    report.tables["sources left out"] = skipped
    if not found:
        return
    names = [f.name for f in SILVER_SOURCES.schema.fields]
    rows = [
        {
            "cluster": cluster,
            "source_hash": sha,
            "bytes": len(data),
            "text": data.decode("utf-8"),
            "ingested_at": now,
        }
        for sha, data in texts.items()
    ]
    frame = ctx.spark.createDataFrame([tuple(r[n] for n in names) for r in rows], SILVER_SOURCES.schema)
    report.add(
        SILVER_SOURCES.name, merge_into(ctx.spark, ctx.settings, SILVER_SOURCES.name, frame, insert_only=True)
    )
    names = [f.name for f in SILVER_JOB_SOURCES.schema.fields]
    links = [
        {"cluster": cluster, "job_id": job, "path": path, "source_hash": sha, "ingested_at": now}
        for job, path, sha, _ in found
    ]
    frame = ctx.spark.createDataFrame([tuple(r[n] for n in names) for r in links], SILVER_JOB_SOURCES.schema)
    counts = merge_into(
        ctx.spark, ctx.settings, SILVER_JOB_SOURCES.name, frame, update_when="t.source_hash <> s.source_hash"
    )
    report.add(SILVER_JOB_SOURCES.name, counts)


def _header_line(lines: list[str], job_id: str) -> int:
    return next((i for i, line in enumerate(lines, 1) if line.strip() == f"Batch Script for {job_id}"), 1)


def link_jobs(ctx: Context, cluster: str) -> int:
    """Set the cluster's silver.jobs.script_hash from silver.job_scripts where it differs; rows updated.

    Only `script_hash` changes (not `ingested_at`): a script says nothing about a job's usage, so gold's
    watermarks stay put."""
    spark, settings = ctx.spark, ctx.settings
    if not table_exists(spark, settings, SILVER_JOBS.name):
        return 0
    jobs = (
        read_table(spark, settings, SILVER_JOBS.name)
        .where(F.col("cluster") == cluster)
        .select("cluster", "job_id", "array_job_id", "het_job_id", "script_hash")
        .withColumn("_stored_hash", F.col("script_hash"))
    )
    links = read_table(spark, settings, SILVER_JOB_SCRIPTS.name).where(F.col("cluster") == cluster)
    changed = (
        with_script_hash(jobs, links)
        .where(~F.col("script_hash").eqNullSafe(F.col("_stored_hash")))
        .select("cluster", "job_id", "script_hash")
        .localCheckpoint()  # the MERGE below rewrites the table this frame was read from
    )
    n = changed.count()
    if n:
        (
            DeltaTable.forPath(spark, table_path(settings, SILVER_JOBS.name))
            .alias("t")
            .merge(changed.alias("s"), "t.cluster = s.cluster AND t.job_id = s.job_id")
            .whenMatchedUpdate(set={"script_hash": "s.script_hash"})
            .execute()
        )
    return n


def run(ctx: Context, paths: Sequence[str], cluster: str, sources: str | None = None) -> IngestReport:
    """Parse each script once per content hash; link jobs to hashes; quarantine jobs without a script;
    with `sources`, store the side folder of sources per job (by hash, linked to the job)."""
    if sources is not None and not Path(sources).is_dir():  # fails before anything is written
        raise UsageError(f"--sources {sources}: not a folder")
    files = read_inputs(paths)
    report = IngestReport(source="scripts", cluster=cluster, files=len(files))
    now = ctx.now()
    scripts: dict[str, dict] = {}
    links: dict[str, dict] = {}
    rejects: list[dict] = []
    unlinked = 0
    for f in files:
        blocks = split_batch_script_output("\n".join(f.lines))
        from_sacct = blocks is not None
        if blocks is None:
            blocks = [(job_id_from_name(f.name), "\n".join(f.lines) + "\n")]
        for job_id, text in blocks:
            report.read += 1
            line_no = _header_line(f.lines, job_id) if from_sacct and job_id else 1
            if not text.strip():
                reason = f"no script text for job {job_id}" + (" (sacct stored NONE)" if job_id else "")
                rejects.append({"source_file": f.name, "line_no": line_no, "raw": text, "reason": reason})
                continue
            info = parse_script(text)
            if info.script_hash in scripts:  # a text seen twice is one silver.scripts row
                report.superseded += 1
            scripts[info.script_hash] = {**info.as_row(), "cluster": cluster, "ingested_at": now}
            if job_id:
                links[job_id] = {
                    "cluster": cluster,
                    "job_id": job_id,
                    "script_hash": info.script_hash,
                    "source_file": f.name,
                    "ingested_at": now,
                }
            else:
                unlinked += 1
    ctx.progress(f"scripts: {report.read} script(s), {len(scripts)} distinct, {unlinked} without a job id")
    report.add("bronze.job_scripts", write_bronze(ctx, "job_scripts", bronze_frame(ctx, files, cluster)))
    if rejects:
        names = [f.name for f in QUARANTINE.schema.fields]
        extra = {"cluster": cluster, "source": "scripts", "ingested_at": now}
        q = ctx.spark.createDataFrame(
            [tuple({**r, **extra}[n] for n in names) for r in rejects], QUARANTINE.schema
        )
        report.quarantined = len(rejects)
        report.add("quarantine", write_quarantine(ctx, q))
    if scripts:
        names = [f.name for f in SILVER_SCRIPTS.schema.fields]
        frame = ctx.spark.createDataFrame(
            [tuple(r[n] for n in names) for r in scripts.values()], SILVER_SCRIPTS.schema
        )
        # Same hash, same text: a stored script never changes.
        counts = merge_into(ctx.spark, ctx.settings, SILVER_SCRIPTS.name, frame, insert_only=True)
        report.add(SILVER_SCRIPTS.name, counts)
        report.inserted, report.unchanged = counts.inserted, counts.unchanged
    if links:
        names = [f.name for f in SILVER_JOB_SCRIPTS.schema.fields]
        frame = ctx.spark.createDataFrame(
            [tuple(r[n] for n in names) for r in links.values()], SILVER_JOB_SCRIPTS.schema
        )
        counts = merge_into(
            ctx.spark,
            ctx.settings,
            SILVER_JOB_SCRIPTS.name,
            frame,
            update_when="t.script_hash <> s.script_hash",
        )
        report.add(SILVER_JOB_SCRIPTS.name, counts)  # links whose hash changed: its `updated`
        linked = link_jobs(ctx, cluster)
        ctx.progress(f"scripts: script_hash set on {linked} silver.jobs row(s)")
        report.tables[SILVER_JOBS.name] = {"script_hash_set": linked}
    report.tables["scripts without a job id"] = {"scripts": unlinked}
    if sources is not None:
        _ingest_sources(ctx, sources, cluster, report)
    return report
