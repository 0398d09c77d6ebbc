"""Why each failed job failed: one primary cause from a declared taxonomy, the evidence used, a confidence,
and a fix with the job's own numbers. Rules only (docs/failures.md), each kind of knowledge a table:

- `taxonomy`: the causes (`CAUSES`) and which jobs get one (`DIAGNOSED_STATES`); no Spark.
- `patterns`: the log-text pattern table and its pure-Python engine (`classify_text`, `log_facts`); no Spark.
- `xid`: the NVIDIA Xid catalogue; no Spark.
- `logs`: which job and stream a log file's name names (`parse_log_file_name`); no Spark.
- `rules`: the accounting/telemetry/log rule table and `with_rule`, which applies it.
- `fixes`: the fix-message table and `fix_message`, which compiles it into one Spark Column.
- `diagnose`: the Spark side (`with_text_diagnosis`, `gpu_signals`, `diagnose_failures`, ...).
- `scoring`: precision, recall and confusion tables against labels.

Import each name from its module: this package file imports nothing, so the Spark-free modules stay
Spark-free for `jobfit explain` and the simulator.
"""
