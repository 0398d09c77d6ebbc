"""`jobfit emails` against a real SMTP server on loopback (aiosmtpd): the MIME received (both parts, headers,
recipient), the ledger (a re-run sends nothing, a killed run resumes), a refused recipient, a relay that is
down; and the .eml outbox."""

from __future__ import annotations

import email
import html
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from email.policy import default as default_policy
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from pyspark.sql import functions as F

from jobs.cli import main
from jobs.io.tables import read_table
from tests.child_env import child_env
from tests.report_month import CLUSTER, MONTH, REPO, BuiltMonth
from tests.servers import free_port

pytestmark = pytest.mark.slow  # the shared simulated month (tests/report_month.py)

SENDER = "jobfit@example.org"
# Low thresholds so that most users of the small simulated month get a digest.
THRESHOLDS = {
    "JOBFIT_EMAILS__MIN_WASTED_USD": "0.01",
    "JOBFIT_EMAILS__MIN_WASTED_SHARE_PCT": "0",
    "JOBFIT_EMAILS__DOMAIN": "example.org",
}


class Recorder:
    """An aiosmtpd handler keeping every accepted message; refuses the recipients in `refuse` (550), and
    may run `on_data` first (returning a reply refuses that message)."""

    def __init__(self, refuse: frozenset[str] = frozenset()) -> None:
        self.refuse = refuse
        self.messages: list[tuple[str, list[str], EmailMessage]] = []
        self.on_data: Callable[[Recorder], str | None] | None = None

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: Any) -> str:  # noqa: N802
        if address in self.refuse:
            return "550 5.1.1 no such mailbox"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        if self.on_data is not None and (reply := self.on_data(self)) is not None:
            return reply
        msg = email.message_from_bytes(envelope.content, policy=default_policy)
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), msg))  # type: ignore[arg-type]
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp_server() -> Iterator[tuple[Recorder, int]]:
    """A real SMTP server on a free loopback port (aiosmtpd in a thread)."""
    recorder = Recorder()
    port = free_port()
    controller = Controller(recorder, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield recorder, port
    finally:
        controller.stop()


def smtp_env(port: int) -> dict[str, str]:
    return {
        "JOBFIT_SMTP__HOST": "127.0.0.1",
        "JOBFIT_SMTP__PORT": str(port),
        "JOBFIT_SMTP__SENDER": SENDER,
        "JOBFIT_SMTP__STARTTLS": "false",
        "JOBFIT_SMTP__RETRIES": "1",
        "JOBFIT_SMTP__BACKOFF_S": "0",
        **THRESHOLDS,
    }


def emails(
    built: BuiltMonth, warehouse: Path, capsys: pytest.CaptureFixture[str], *args: str, **env: str
) -> tuple[int, dict[str, Any] | None, str]:
    capsys.readouterr()
    code = main(
        ["emails", "--cluster", CLUSTER, "--month", MONTH, "--json", *args], ctx=built.ctx(warehouse, **env)
    )
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code == 0 else None), out.err


def ledger(built: BuiltMonth, warehouse: Path) -> list[dict[str, Any]]:
    ctx = built.ctx(warehouse)
    from jobs.io.tables import table_exists

    if not table_exists(ctx.spark, ctx.settings, "ops.email_ledger"):
        return []
    rows = read_table(ctx.spark, ctx.settings, "ops.email_ledger").where(F.col("month") == MONTH).collect()
    return sorted((r.asDict() for r in rows), key=lambda r: (r["transport"], r["user"]))


def test_send_mime_ledger_refused_recipient_and_rerun(
    built_month: BuiltMonth,
    smtp_server: tuple[Recorder, int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    recorder, port = smtp_server
    warehouse = built_month.copy_warehouse(tmp_path / "wh")
    code, dry, _ = emails(built_month, warehouse, capsys, "--send", "--dry-run", **smtp_env(port))
    assert code == 0 and dry is not None and not recorder.messages and not ledger(built_month, warehouse)
    users = [m["user"] for m in dry["messages"]]
    assert len(users) >= 3
    refused = dry["messages"][1]["recipient"]
    recorder.refuse = frozenset({refused})

    code, sent, err = emails(built_month, warehouse, capsys, "--send", **smtp_env(port))
    assert code == 0, err
    assert sent is not None and sent["sent"] == len(users) - 1 and sent["refused"] == 1
    assert [m["user"] for m in sent["messages"]] == users  # the ranking (largest saving first) is kept
    savings = [m["saving_usd"] for m in sent["messages"]]
    assert savings == sorted(savings, reverse=True)
    assert len(recorder.messages) == len(users) - 1
    for mail_from, rcpt, msg in recorder.messages:
        assert mail_from == SENDER and rcpt == [str(msg["To"])] and msg["From"] == SENDER
        assert (
            msg["Subject"].startswith(f"[jobfit] {CLUSTER} {MONTH}: ") and msg["Message-ID"] and msg["Date"]
        )
        assert msg.get_content_type() == "multipart/alternative"
        plain, html = (part.get_content_type() for part in msg.iter_parts())
        assert (plain, html) == ("text/plain", "text/html")
        user = str(msg["To"]).split("@")[0]
        text = msg.get_body(("plain",)).get_content()
        assert f"Hello {user}," in text and "None" not in text
        assert "Failures and their fixes" in text and "What to change" in text
        assert f"Hello {user}," in msg.get_body(("html",)).get_content()
    rows = ledger(built_month, warehouse)
    assert {r["user"]: r["status"] for r in rows} == {
        u: ("refused" if f"{u}@example.org" == refused else "sent") for u in users
    }
    refusal = next(r for r in rows if r["status"] == "refused")
    assert refusal["detail"].startswith("550") and refusal["recipient"] == refused

    # A re-run sends nobody twice: only the refused recipient is tried again (and refused again).
    code, again, _ = emails(built_month, warehouse, capsys, "--send", **smtp_env(port))
    assert code == 0 and again is not None
    assert again["sent"] == 0 and again["already_delivered"] == len(users) - 1 and again["refused"] == 1
    assert len(recorder.messages) == len(users) - 1


def test_relay_down_is_a_clear_error_and_leaves_the_ledger(
    built_month: BuiltMonth, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    warehouse = built_month.copy_warehouse(tmp_path / "wh")
    before = ledger(built_month, warehouse)
    code, _, err = emails(built_month, warehouse, capsys, "--send", **smtp_env(free_port()))
    assert code == 2 and "Traceback" not in err
    assert "SMTP relay 127.0.0.1" in err and "nothing sent, ledger unchanged" in err
    assert len(err.strip().splitlines()) == 1
    assert ledger(built_month, warehouse) == before
    code, _, err = emails(
        built_month, warehouse, capsys, "--send", **{**smtp_env(free_port()), "JOBFIT_SMTP__USER": "bot"}
    )
    assert code == 2 and "JOBFIT_SMTP_PASSWORD is not set" in err


def test_outbox_writes_eml_once(
    built_month: BuiltMonth, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    warehouse = built_month.copy_warehouse(tmp_path / "wh")
    outbox = tmp_path / "outbox"
    code, first, err = emails(built_month, warehouse, capsys, "--outbox", str(outbox), **THRESHOLDS)
    assert code == 0 and first is not None, err
    files = sorted((outbox / CLUSTER / MONTH).glob("*.eml"))
    assert len(files) == first["written"] >= 3
    msg = email.message_from_bytes(files[0].read_bytes(), policy=default_policy)
    assert msg.get_content_type() == "multipart/alternative" and msg["To"].endswith("@example.org")
    assert {r["status"] for r in ledger(built_month, warehouse)} == {"written"}
    code, second, _ = emails(built_month, warehouse, capsys, "--outbox", str(outbox), **THRESHOLDS)
    assert code == 0 and second is not None and second["written"] == 0
    assert second["already_delivered"] == first["written"]
    # Opting out removes a user from the next month's candidates (and this one's, had they not had it yet).
    opted = first["messages"][0]["user"]
    code, third, _ = emails(
        built_month, warehouse, capsys, "--dry-run", **THRESHOLDS, JOBFIT_EMAILS__OPT_OUT=f"[{opted}]"
    )
    assert code == 0 and third is not None and third["opted_out"] == [opted]

    # A user with bottleneck findings reads the costliest ones in both parts, with the fix and its GPU-hours.
    ctx = built_month.ctx(warehouse)
    findings = (
        read_table(ctx.spark, ctx.settings, "gold.job_bottlenecks")
        .where(F.col("month") == MONTH)
        .orderBy(F.desc_nulls_last("gpu_hours_recoverable"), "job_id", "kind", "source")
        .collect()
    )
    written = {m["user"]: Path(m["path"]) for m in first["messages"]}
    mine = [f for f in findings if f["user"] in written]
    assert mine, "a digest goes to a user with a bottleneck finding"
    top = mine[0]
    msg = email.message_from_bytes(written[top["user"]].read_bytes(), policy=default_policy)
    for part in ("plain", "html"):
        body = " ".join(html.unescape(msg.get_body(preferencelist=(part,)).get_content()).split())
        assert "What held your GPUs back" in body, part
        assert f"job {top['job_id']}: {top['kind']}" in body.replace("<b>", "").replace("</b>", ""), part
        assert " ".join(top["fix"].split()).split(":")[0] in body, part
    others = {f["user"] for f in findings}
    quiet = next((u for u in written if u not in others), None)
    if quiet is not None:  # no finding: no section
        msg = email.message_from_bytes(written[quiet].read_bytes(), policy=default_policy)
        assert "What held your GPUs back" not in msg.get_body(preferencelist=("plain",)).get_content()


def test_killed_run_sends_only_the_rest(
    built_month: BuiltMonth,
    smtp_server: tuple[Recorder, int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A run killed (SIGKILL) while sending its second digest: the re-run sends everyone else exactly once."""
    recorder, port = smtp_server
    warehouse = built_month.copy_warehouse(tmp_path / "wh")
    env = child_env() | built_month.env(warehouse, **smtp_env(port), JOBFIT_SPARK__MASTER="local[1]")
    cmd = [sys.executable, "-m", "jobs.cli", "-q", "emails", "--cluster", CLUSTER, "--month", MONTH, "--send"]
    with (tmp_path / "killed.log").open("w") as log:
        process = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=log, start_new_session=True)

    def kill_on_second(rec: Recorder) -> str | None:
        if len(rec.messages) == 1:
            os.killpg(process.pid, signal.SIGKILL)
            return "451 4.3.0 try again later"
        return None

    recorder.on_data = kill_on_second
    assert process.wait(timeout=600) == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-2000:]
    assert len(recorder.messages) == 1
    first_to = str(recorder.messages[0][2]["To"])
    recorder.on_data = None
    code, rest, err = emails(built_month, warehouse, capsys, "--send", **smtp_env(port))
    assert code == 0 and rest is not None, err
    assert rest["already_delivered"] == 1 and rest["sent"] == rest["candidates"] - 1
    received = [str(m[2]["To"]) for m in recorder.messages]
    assert len(received) == len(set(received)) == rest["candidates"] and first_to in received
    assert {r["recipient"] for r in ledger(built_month, warehouse) if r["status"] == "sent"} == set(received)
