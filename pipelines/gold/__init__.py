"""Silver into gold: waste and dollars per job, month rollups, failure causes."""
