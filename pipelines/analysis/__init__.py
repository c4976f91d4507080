"""The analysis stage: a run's parse tables into its analysis tables, in SQL and in Python."""
