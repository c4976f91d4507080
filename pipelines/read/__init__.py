"""Raw inputs: what each file of a run is, and reading it (traces, NCCL logs, Flight Recorder dumps)."""
