"""The netdev MTU fact: its key and its type, the pure module its source and its families share.

The worked example of ARCHITECTURE.md, "Adding a check family": copied into
``nichealthd/sources/`` beside the source that reads it (``netdev_mtu.py``). The core may
import it (``tests/test_layout.py``): it imports only the core's model.
"""

from __future__ import annotations

from typing import Mapping, Optional

from nichealthd.core.model import Fact

Mtus = Mapping[str, tuple[str, Optional[int]]]  # port key -> (netdev, MTU or None: unreadable)
NETDEV_MTU: Fact[Mtus] = Fact("netdev_mtu")
