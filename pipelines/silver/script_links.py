"""Which job script each silver.jobs row ran: `script_hash` from the silver.job_scripts links.

silver.job_scripts keeps a link under the job id it was given (a file `12345.sh`, `12345_7.sh`, or sacct's
`Batch Script for 12345`). A job row takes the link of its own `job_id`; an array task without one takes its
array job's (`12345_7` ← `12345`: Slurm stores one batch script per array, and every task runs it); a
het-job component without one takes its het job's (`12345+1` ← `12345`: the components share one batch
script). A row no link reaches keeps the hash it has.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

# The job-row columns a link may be found under, most specific first.
LINK_COLUMNS: tuple[str, ...] = ("job_id", "array_job_id", "het_job_id")


def with_script_hash(jobs: DataFrame, links: DataFrame) -> DataFrame:
    """`jobs` (silver.jobs columns, any extra columns kept) with `script_hash` set from `links`
    (silver.job_scripts: cluster, job_id, script_hash): own link, else the array's, else the het job's."""
    one_link = links.select("cluster", "job_id", "script_hash").dropDuplicates(["cluster", "job_id"])
    out = jobs
    for column in LINK_COLUMNS:
        out = out.join(
            one_link.select(
                "cluster", F.col("job_id").alias(column), F.col("script_hash").alias(f"_hash_by_{column}")
            ),
            on=["cluster", column],
            how="left",
        )
    found = F.coalesce(*[F.col(f"_hash_by_{c}") for c in LINK_COLUMNS], F.col("script_hash"))
    return out.select(*[found.alias(c) if c == "script_hash" else F.col(c) for c in jobs.columns])
