"""I/O at the edge: the Spark session, Delta tables, Great Expectations runs, the MLflow registry and
the reads for training and prediction."""
