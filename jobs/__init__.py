"""Entry points: the Spark session, table I/O and the `jobfit` CLI — the only package that does I/O."""
