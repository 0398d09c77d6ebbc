"""`jobfit emails`: the month's per-user digests written to the outbox (.eml) or handed to an SMTP relay,
with the ledger (ops.email_ledger) that makes a re-run send nobody the same month twice."""

from __future__ import annotations

import contextlib
import smtplib
import ssl
import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from conf import SmtpSettings
from jobs.context import Context, DataError, UsageError
from jobs.io.files import write_bytes_atomic
from jobs.io.tables import merge_into, read_table
from jobs.stages.report import require_month, safe_name, user_bottlenecks, user_failures, user_rows
from pipelines.schemas import OPS_EMAIL_LEDGER
from reports.mail import build_message, candidates, digest, message_id, ranked, recipient, user_savings_usd

LEDGER = OPS_EMAIL_LEDGER.name
DELIVERED = ("sent", "written")


class SmtpUnavailableError(Exception):
    """The relay could not be reached or refused the session, after every retry."""


def _delivered(ctx: Context, cluster: str, month: str, transport: str) -> set[str]:
    """Users whose digest of the month the ledger records as delivered by `transport`."""
    rows = (
        read_table(ctx.spark, ctx.settings, LEDGER)
        .where(
            (F.col("cluster") == cluster)
            & (F.col("month") == month)
            & (F.col("transport") == transport)
            & F.col("status").isin(*DELIVERED)
        )
        .select("user")
        .collect()
    )
    return {r["user"] for r in rows}


def _record(ctx: Context, rows: list[dict[str, Any]]) -> None:
    """MERGE ledger rows on (cluster, month, user, transport)."""
    if rows:
        df = ctx.spark.createDataFrame(rows, schema=OPS_EMAIL_LEDGER.schema)
        merge_into(ctx.spark, ctx.settings, LEDGER, df)


def _ledger_row(
    cluster: str,
    month: str,
    user: str,
    transport: str,
    msg: EmailMessage,
    status: str,
    detail: str | None,
    attempts: int,
    at: datetime,
) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "month": month,
        "user": user,
        "transport": transport,
        "recipient": str(msg["To"]),
        "message_id": str(msg["Message-ID"]),
        "status": status,
        "detail": detail,
        "attempts": attempts,
        "sent_at": at,
    }


class Relay:
    """One SMTP session to the configured relay, reopened after a lost connection; every attempt retried
    with exponential back-off on temporary failures (4xx replies, a dropped or refused connection)."""

    def __init__(self, smtp: SmtpSettings, password: str | None, sleep: Callable[[float], None] = time.sleep):
        self.smtp, self.password, self.sleep = smtp, password, sleep
        self.session: smtplib.SMTP | None = None

    def _open(self) -> smtplib.SMTP:
        s = self.smtp
        if s.ssl:
            session: smtplib.SMTP = smtplib.SMTP_SSL(
                s.host, s.port, timeout=s.timeout_s, context=ssl.create_default_context()
            )
        else:
            session = smtplib.SMTP(s.host, s.port, timeout=s.timeout_s)
            if s.starttls:
                session.starttls(context=ssl.create_default_context())
        if s.user:
            session.login(s.user, self.password or "")
        return session

    def _attempt(self, call: Callable[[smtplib.SMTP], Any]) -> tuple[Any, int]:
        """Run `call` on an open session, retrying temporary failures; (its result, attempts made)."""
        attempts, last = 0, ""
        for attempt in range(self.smtp.retries + 1):
            attempts = attempt + 1
            if attempt:
                self.sleep(self.smtp.backoff_s * 2 ** (attempt - 1))
            try:
                if self.session is None:
                    self.session = self._open()
                return call(self.session), attempts
            except smtplib.SMTPAuthenticationError as exc:
                raise SmtpUnavailableError(
                    f"the relay refused the login of {self.smtp.user}: {exc.smtp_code}"
                ) from exc
            except smtplib.SMTPRecipientsRefused:
                raise
            except smtplib.SMTPResponseException as exc:
                if exc.smtp_code < 400 or exc.smtp_code >= 500:
                    raise
                last = f"{exc.smtp_code} {exc.smtp_error!r}"
            except (smtplib.SMTPServerDisconnected, smtplib.SMTPConnectError, OSError, TimeoutError) as exc:
                last = str(exc) or type(exc).__name__
                self.close()
        raise SmtpUnavailableError(
            f"SMTP relay {self.smtp.host}:{self.smtp.port} failed {attempts} time(s), last: {last}"
        )

    def connect(self) -> None:
        """Open the session now (so that a relay that is down stops the run before anything is sent)."""
        self._attempt(lambda session: session.noop())

    def send(self, msg: EmailMessage, sender: str) -> tuple[str, str | None, int]:
        """Hand one message over: ("sent", None, attempts), or ("refused", the server's reply, attempts)
        when the relay refused its recipient or its content for good (5xx)."""
        try:
            _, attempts = self._attempt(lambda session: session.send_message(msg, from_addr=sender))
            return "sent", None, attempts
        except smtplib.SMTPRecipientsRefused as exc:
            code, reply = next(iter(exc.recipients.values()))
            return (
                "refused",
                f"{code} {reply.decode(errors='replace') if isinstance(reply, bytes) else reply}",
                1,
            )
        except smtplib.SMTPResponseException as exc:
            error = (
                exc.smtp_error.decode(errors="replace")
                if isinstance(exc.smtp_error, bytes)
                else exc.smtp_error
            )
            return "refused", f"{exc.smtp_code} {error}", 1

    def close(self) -> None:
        if self.session is not None:
            with contextlib.suppress(smtplib.SMTPException, OSError):
                self.session.quit()
            self.session = None


def _password(ctx: Context, smtp: SmtpSettings) -> str | None:
    """The relay password, only from the environment variable `smtp.password_env` names."""
    password = ctx.environ.get(smtp.password_env) or None
    if smtp.user and password is None:
        raise UsageError(
            f"smtp.user is {smtp.user} but ${smtp.password_env} is not set (the only place for the password)"
        )
    return password


def send_digests(
    ctx: Context, cluster: str, month: str, outbox: Path | None, send: bool, dry_run: bool
) -> dict[str, Any]:
    """Write (outbox) or send (SMTP) the month's digests to every user with something worth saying who has
    not had theirs by that transport, largest saving first; record each in the ledger. Returns the
    `jobfit emails --json` payload."""
    started = time.monotonic()
    settings = ctx.settings.emails
    smtp = ctx.settings.smtp
    transport = "smtp" if send else "outbox"
    if send and smtp is None:
        raise UsageError(
            "--send needs smtp settings (host, port, sender) in conf/local.yaml or JOBFIT_SMTP__*"
        )
    password = _password(ctx, smtp) if send and smtp is not None else None
    require_month(ctx, cluster, month)
    users = {u["user"]: u for u in user_rows(ctx, cluster, month) if u["user"]}
    chosen, opted_out = candidates(list(users.values()), settings)
    delivered = _delivered(ctx, cluster, month, transport)
    todo = [u for u in chosen if u not in delivered]
    from jobs.stages.advice import month_recommendations

    recs = (
        month_recommendations(ctx, cluster, month, users=set(todo))
        if todo
        else {"status": "ok", "why": None, "items": []}
    )
    savings = user_savings_usd(recs["items"])
    failures = user_failures(ctx, cluster, month, todo)
    bottlenecks = user_bottlenecks(ctx, cluster, month, todo)
    order = [u["user"] for u in ranked([users[u] for u in todo], savings)]
    sender = smtp.sender if smtp is not None else f"jobfit@{settings.domain}"
    folder = (outbox or Path(ctx.settings.outbox)) / safe_name(cluster) / month
    results: list[dict[str, Any]] = []
    relay = Relay(smtp, password) if send and smtp is not None and not dry_run and order else None
    if relay is not None:
        try:
            relay.connect()
        except SmtpUnavailableError as exc:
            raise UsageError(f"{exc}; nothing sent, ledger unchanged") from None
    pending_ledger: list[dict[str, Any]] = []
    try:
        for user in order:
            view = digest(
                users[user],
                recs["items"],
                failures[user],
                recs["status"],
                recs["why"],
                settings,
                bottlenecks[user],
            )
            at = ctx.now().replace(tzinfo=UTC)
            msg = build_message(
                view, sender, recipient(user, settings), message_id(cluster, month, user, settings.domain), at
            )
            entry = {
                "user": user,
                "recipient": str(msg["To"]),
                "subject": str(msg["Subject"]),
                "saving_usd": savings.get(user, 0.0),
            }
            if dry_run:
                results.append({**entry, "status": "would_" + ("send" if send else "write"), "path": None})
                continue
            if relay is None:
                path = folder / f"{safe_name(user)}.eml"
                write_bytes_atomic(path, msg.as_bytes())
                pending_ledger.append(
                    _ledger_row(
                        cluster, month, user, transport, msg, "written", str(path), 1, at.replace(tzinfo=None)
                    )
                )
                results.append({**entry, "status": "written", "path": str(path)})
                continue
            try:
                status, detail, attempts = relay.send(msg, sender)
            except SmtpUnavailableError as exc:
                raise DataError(
                    f"{exc}; stopped after {sum(r['status'] == 'sent' for r in results)} sent "
                    "(the ledger has them: a re-run sends only the rest)"
                ) from None
            # One ledger commit per message: a run killed after this line never sends the user again.
            _record(
                ctx,
                [
                    _ledger_row(
                        cluster,
                        month,
                        user,
                        transport,
                        msg,
                        status,
                        detail,
                        attempts,
                        at.replace(tzinfo=None),
                    )
                ],
            )
            results.append({**entry, "status": status, "path": None, "detail": detail})
    finally:
        if relay is not None:
            relay.close()
        _record(ctx, pending_ledger)
    counts = {s: sum(r["status"] == s for r in results) for s in ("sent", "written", "refused")}
    return {
        "cluster": cluster,
        "month": month,
        "transport": transport,
        "dry_run": dry_run,
        "outbox": str(folder) if transport == "outbox" else None,
        "candidates": len(chosen),
        "already_delivered": len(set(chosen) & delivered),
        "opted_out": opted_out,
        **counts,
        "recommendations": {"status": recs["status"], "why": recs["why"]},
        "messages": results,
        "seconds": round(time.monotonic() - started, 2),
    }
