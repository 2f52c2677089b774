"""Slurm: drain this node on a fatal event and resume it once it recovered (optional).

A surface on the seam (``surfaces/seam.py``): found by its ``SURFACE``, it keeps the
``slurm`` journal cursor while ``slurmDrain`` is on, and declares its keys in
``settings.py``. Its service is always made, so that a reload can switch ``slurmDrain`` on;
it idles while that is off.
"""

from ..seam import Surface
from .settings import SlurmSettings

SURFACE = Surface(
    "draining in Slurm", "nichealthd.surfaces.slurm.service", "SlurmService",
    lambda config: config.settings(SlurmSettings).drain, cursor="slurm",
    settings=SlurmSettings, order=90,
    always=True)  # a reload may switch slurmDrain on; it idles while that is off
