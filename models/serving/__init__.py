"""The recommendation service's pure half: the answer both `jobfit recommend` and `jobfit serve` give
(`answer.py`), the HTTP request/response models, the loaded-state holder, metrics and the FastAPI app.
Nothing here reads MLflow or Spark: the edge (jobs/stages/serve.py) hands the loaded champions in."""
