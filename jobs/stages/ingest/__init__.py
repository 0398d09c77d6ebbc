"""One ingest runner per source (`<source>.py`); `common.py` is the path they share: read inputs,
land bronze, quarantine rejects, count."""
