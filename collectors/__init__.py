"""Collectors run inside training jobs and write run folders; they never import dagster.

`Capture` (in `collectors.capture`) needs torch; the launcher and the run-folder helpers do not,
so `wirespeed collect` works in an environment without torch.
"""
