"""Stage runners: one per ingest source, the gold build, the failures build (tables in, tables out)."""
