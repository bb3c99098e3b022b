"""Results: the Parquet tables every step writes and notebooks read."""

from bertology.results.tables import SCHEMA_VERSION, TABLES, publish, results_key, scan

__all__ = ["SCHEMA_VERSION", "TABLES", "publish", "results_key", "scan"]
