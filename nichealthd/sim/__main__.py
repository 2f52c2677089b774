"""Allows `python -m nichealthd.sim` where the console script is not installed."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
