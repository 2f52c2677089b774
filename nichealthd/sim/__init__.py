"""nichealthd-sim: builds and mutates a realistic fake GPU host for tests, benchmarks and drills.

`tree.create(root, profile)` writes the host; the `mutate` functions change it in place;
`cli.main` is the console script. All of them raise `SimError` for a bad argument.
"""

from __future__ import annotations

from .fsio import SimError

__all__ = ["SimError"]
