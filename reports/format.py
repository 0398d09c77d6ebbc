"""How figures read in reports and e-mails: dollars to the cent, shares in %, hours; never `None`."""

from __future__ import annotations

UNKNOWN = "unknown"


def usd(value: float | None) -> str:
    """US dollars to the cent with thousands separators ("$1,234.56"); "unknown" for a missing figure."""
    if value is None:
        return UNKNOWN
    cents = round(float(value) + 0.0, 2)
    return f"-${-cents:,.2f}" if cents < 0 else f"${cents:,.2f}"


def pct(value: float | None, digits: int = 1) -> str:
    """A percentage ("34.4 %"); "n/a" where there is no base to take a share of."""
    return "n/a" if value is None else f"{float(value):.{digits}f} %"


def num(value: float | None, digits: int = 1) -> str:
    """A quantity with thousands separators ("1,234.5"); "unknown" for a missing figure."""
    return UNKNOWN if value is None else f"{float(value):,.{digits}f}"


def count(value: int | None) -> str:
    """A whole count with thousands separators; "unknown" when missing."""
    return UNKNOWN if value is None else f"{int(value):,}"


def duration(seconds: float | None) -> str:
    """Seconds as "H:MM:SS" (days as "D-HH:MM:SS", as Slurm writes them); "unknown" when missing."""
    if seconds is None:
        return UNKNOWN
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{s:02d}" if days else f"{hours}:{minutes:02d}:{s:02d}"


def share(part: float | None, whole: float | None) -> float | None:
    """`part` as a percentage of `whole`; None when either is missing or the whole is not positive."""
    if part is None or whole is None or whole <= 0:
        return None
    return float(part) / float(whole) * 100.0


FILTERS = {"usd": usd, "pct": pct, "num": num, "count": count, "duration": duration}
