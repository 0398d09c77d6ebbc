"""The failure tables agree with each other: taxonomy, pattern table, rule table, fix table, the simulator's
causes; and the Spark-free modules import no Spark."""

from __future__ import annotations

import re
import subprocess
import sys

from pyspark.sql import SparkSession

from jobs.simulator.catalog import FAILURE_CAUSES, USER_FIXABLE
from pipelines.gold.failures.fixes import FIXES, quotes
from pipelines.gold.failures.patterns import LOG_PATTERNS
from pipelines.gold.failures.rules import rules
from pipelines.gold.failures.taxonomy import CAUSES, UNKNOWN


def test_every_cause_has_a_fix_for_any_detail() -> None:
    catch_all = {f.cause for f in FIXES if f.detail is None and f.when is None}
    assert catch_all == set(CAUSES)
    assert {f.cause for f in FIXES} <= set(CAUSES)
    # no row is shadowed by an earlier catch-all of its cause
    for i, f in enumerate(FIXES):
        assert f.cause not in {g.cause for g in FIXES[:i] if g.detail is None and g.when is None}, f


def test_fix_texts_quote_only_known_numbers(spark: SparkSession) -> None:
    names = {n for f in FIXES for n in re.findall(r"\{(\w+)\}", f.text)}
    assert names <= set(quotes())
    assert not [f.text for f in FIXES if re.search(r"[{}]", re.sub(r"\{\w+\}", "", f.text))]


def test_rules_give_declared_causes(spark: SparkSession) -> None:
    table = rules()
    assert {r.cause for r in table if r.cause} <= set(CAUSES)
    assert {p.cause for p in LOG_PATTERNS} <= set(CAUSES)
    assert len({r.name for r in table}) == len(table)


def test_simulator_reads_its_causes_from_the_taxonomy() -> None:
    assert set(FAILURE_CAUSES) == (set(CAUSES) - {UNKNOWN}) | {"none"}
    assert all(USER_FIXABLE[name] == CAUSES[name].user_fixable for name in FAILURE_CAUSES if name != "none")


def test_text_modules_import_no_spark() -> None:
    modules = ("logs", "patterns", "taxonomy", "xid", "tracebacks", "fix_table", "explain")
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module('pipelines.gold.failures.' + m)\n"
        "assert not [m for m in sys.modules if m.startswith(('pyspark', 'pandas'))], 'Spark imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
