"""`jobfit ingest k8s PATH... --cluster C`: Kubernetes Pod objects (JSON lines or `kubectl get pods -o json`
List documents) into silver.jobs with source `k8s`."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from pyspark.sql import types as T

from jobs.context import Context
from jobs.stages.ingest.common import (
    IngestReport,
    bronze_frame,
    merge_jobs,
    read_inputs,
    write_bronze,
    write_quarantine,
)
from pipelines.schemas import QUARANTINE, SILVER_JOBS
from pipelines.silver.k8s import parse_pod, split_pod_records


def run(ctx: Context, paths: Sequence[str], cluster: str) -> IngestReport:
    """Read pod files into bronze.k8s_pods, parse pods into silver.jobs, quarantine bad records."""
    files = read_inputs(paths)
    report = IngestReport(source="k8s", cluster=cluster, files=len(files))
    now = ctx.now()
    rows: list[dict] = []
    rejects: list[dict] = []
    for f in files:
        for no, raw, obj, reason in split_pod_records(f.lines):
            report.read += 1
            if reason is None:
                try:
                    rows.append({**parse_pod(obj), "source_file": f.name, "line_no": no, "raw": raw})
                    continue
                except ValueError as exc:
                    reason = str(exc)
            rejects.append({"source_file": f.name, "line_no": no, "raw": raw, "reason": reason})
    ctx.progress(f"k8s: {report.read} pod record(s) in {len(files)} file(s), {len(rejects)} rejected")
    report.add("bronze.k8s_pods", write_bronze(ctx, "k8s_pods", bronze_frame(ctx, files, cluster)))
    if rejects:
        q = pd.DataFrame(rejects).assign(cluster=cluster, source="k8s", ingested_at=pd.Timestamp(now))
        q = q[[f.name for f in QUARANTINE.schema.fields]]
        report.quarantined = len(rejects)
        report.add(
            "quarantine", write_quarantine(ctx, ctx.spark.createDataFrame(q, schema=QUARANTINE.schema))
        )
    if rows:
        schema = T.StructType([*SILVER_JOBS.schema.fields, T.StructField("raw", T.StringType())])
        extra = {"cluster": cluster, "ingested_at": now}
        frame = ctx.spark.createDataFrame(
            [tuple({**r, **extra}[f.name] for f in schema.fields) for r in rows], schema=schema
        )
        counts, report.superseded, invalid = merge_jobs(ctx, frame, "k8s")
        report.quarantined += invalid
        report.add(SILVER_JOBS.name, counts)
        report.inserted, report.updated, report.unchanged = counts.inserted, counts.updated, counts.unchanged
    return report
