"""The parse stage: a run's raw inputs into its parse tables, and what the readers skipped or doubted
into `parse_issues`."""
