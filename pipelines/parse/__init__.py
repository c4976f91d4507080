"""The parse stage: a run's raw inputs into its parse tables, and what it skipped or doubted."""
