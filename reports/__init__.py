"""Reports: the monthly PDF reports and the per-user e-mail digests, from plain records (no I/O here)."""
