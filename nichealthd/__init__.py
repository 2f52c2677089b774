"""nichealthd: a NIC health daemon for GPU hosts (InfiniBand / RoCE)."""

from .carried import use_carried_libraries

use_carried_libraries()  # before any entry point imports a library (packaging/README.md)

__version__ = "0.1.0"
