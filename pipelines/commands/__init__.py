"""The `wirespeed` commands: cli.py wires them, a module each where a command is more than a call."""
