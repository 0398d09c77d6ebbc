"""docs/tables.md: its generated part matches pipelines/schemas.py, and its example queries run."""

from __future__ import annotations

import json

import pytest

from jobs.tables_doc import BEGIN, DOC, END, EXAMPLE_QUERIES, ExampleQuery, generated, render
from pipelines.schemas import TABLES
from tests.report_month import BuiltMonth, run_jobfit


def test_committed_doc_is_what_the_generator_writes() -> None:
    current = DOC.read_text()
    assert BEGIN in current and END in current
    assert render(current) == current, "docs/tables.md drifted: run `python -m jobs.tables_doc`"


def test_every_table_and_column_is_listed() -> None:
    text = generated()
    for spec in TABLES.values():
        section = text.split(f"### `{spec.name}`\n", 1)[1].split("\n### ", 1)[0]
        assert [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")] == list(
            spec.columns
        )


def test_render_replaces_only_the_generated_part() -> None:
    doc = f"# Tables\n\nhand-written: newer wins.\n\n{BEGIN}\nstale\n{END}\n\nafter, by hand.\n"
    out = render(doc)
    assert out.startswith("# Tables\n\nhand-written: newer wins.\n\n" + BEGIN)
    assert out.endswith(f"{END}\n\nafter, by hand.\n")
    assert "stale" not in out and "## Example queries" in out
    assert render(out) == out
    assert render("# Tables\n").startswith("# Tables\n\n" + BEGIN)


@pytest.mark.slow
@pytest.mark.parametrize("query", EXAMPLE_QUERIES, ids=lambda q: q.title)
def test_example_query_answers_on_a_built_month(
    query: ExampleQuery, built_month: BuiltMonth, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    code = run_jobfit(built_month.ctx(), "sql", query.sql, "--json", "--limit", "1000")
    out = capsys.readouterr()
    assert code == 0, out.err
    result = json.loads(out.out)
    assert result["rows"], f"{query.title}: no rows on the simulated month"
