"""The check families: every module of this package that defines ``FAMILY`` is one.

They are found, not listed, so adding a family is adding its module: the
evaluator, the state file, the health model, the views and the metrics loop over
:func:`families`, in the order each declares. The other modules here are the rules the
families use (port state, device presence, card homogeneity, the counter engine).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Optional

from ..config import Config
from ..family import CheckFamily, Family, supplies

_found: Optional[tuple[Family, ...]] = None


def families() -> tuple[Family, ...]:
    """Every family, in :attr:`CheckFamily.order`; ids and state-file keys are unique."""
    global _found
    if _found is None:
        found: list[Family] = []
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            module = importlib.import_module(f"{__name__}.{info.name}")
            family = getattr(module, "FAMILY", None)
            if isinstance(family, CheckFamily):
                found.append(family)
        found.sort(key=lambda f: (f.order, f.id))
        _check_unique(found)
        _found = tuple(found)
    return _found


def supplying(method: str) -> tuple[Family, ...]:
    """The families that override ``method`` of :class:`CheckFamily` (:func:`supplies`), in
    order: the loops run every poll over a hook few families have go over these only."""
    found = families()
    known = _supplying.get(method)
    if known is None or known[0] is not found:  # worked out once per registry
        known = _supplying[method] = (found, tuple(f for f in found if supplies(f, method)))
    return known[1]


_supplying: dict[str, tuple[tuple[Family, ...], tuple[Family, ...]]] = {}


def enabled_under(config: Config) -> tuple[Family, ...]:
    """The families enabled under ``config``, in order. Worked out once per config and
    registry: a config never changes (a reload makes a new one), and every poll asks
    several times."""
    global _enabled
    found, known = families(), _enabled
    if known is None or known[0] is not found or known[1] is not config:
        known = _enabled = (found, config, tuple(f for f in found if f.enabled(config)))
    return known[2]


_enabled: Optional[tuple[tuple[Family, ...], Config, tuple[Family, ...]]] = None


def _check_unique(found: list[Family]) -> None:
    ids: set[str] = set()
    keys: set[str] = {"version", "boot_id", "event_seq", "schemas"}
    for family in found:
        if family.id in ids:
            raise RuntimeError(f"two check families are called {family.id}")
        ids.add(family.id)
        if keys & set(family.keys):
            raise RuntimeError(f"{family.id} claims state keys of another: "
                               f"{sorted(keys & set(family.keys))}")
        keys.update(family.keys)
