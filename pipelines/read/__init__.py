"""Raw inputs: what each file of a run is, reading it (traces, NCCL logs, Flight Recorder dumps),
and what was skipped or doubted on the way."""
