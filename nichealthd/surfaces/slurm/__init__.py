"""Slurm: drain this node on a fatal event and resume it once it recovered (optional)."""
