"""Slurm draining: the pure rules, the consumer, and a real slurmctld + slurmd."""
