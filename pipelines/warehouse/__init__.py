"""The warehouse: each run's tables in versions of Parquet files, DuckDB sessions over them, roll-ups."""
