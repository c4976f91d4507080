"""The one partitioning of wirespeed's assets: a dynamic partition per ingested run."""

import dagster as dg

runs_partitions = dg.DynamicPartitionsDefinition(name="runs")
