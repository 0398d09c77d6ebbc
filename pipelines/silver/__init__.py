"""Raw source records into typed silver rows, one module per source, plus the silver checks and joins."""
