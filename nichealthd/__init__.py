"""nichealthd: a NIC health daemon for GPU hosts (InfiniBand / RoCE)."""

__version__ = "0.1.0"
