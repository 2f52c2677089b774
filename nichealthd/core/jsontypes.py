"""JSON as it crosses the package's edges (state file, event JSON, records, varlink, D-Bus
dictionaries), typed: what is written is checked to be JSON, and what is read is an
``object`` narrowed by the reader, never an unchecked ``Any``.

``Json`` is recursive (mypy resolves the forward references); ``JsonObject`` is what records
and sections are written as; a decoded document is read as ``object`` and narrowed with
``isinstance`` by its parser (``core/codec.py``), so a wrong type is an error message, not a
crash.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Union

JsonScalar = Union[None, bool, int, float, str]
Json = Union[JsonScalar, List["Json"], Dict[str, "Json"]]
JsonObject = Dict[str, Json]
# A record only read by key (a surface's answer, a record built by a view): covariant in its
# values, so a ``dict[str, int]`` is one.
JsonRecord = Mapping[str, object]
