"""The one codec of the state's sections (core/codec.py): random round trips of every section,
every kind of malformed field refused as a corrupt state, legacy keys, unknown keys.

The malformed and legacy cases edit the state files written by main (tests/core/golden_state.py)
in one place each, so every other key around the edit is one main wrote.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import string
import typing
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Optional, Union

import pytest

from nichealthd.core import codec
from nichealthd.core.checks import families
from nichealthd.core.checks.counter_section import BreachFlag
from nichealthd.core.checks.efa_state import EFA_STATE, EfaPort
from nichealthd.core.checks.kernel_log import KERNEL_LOG
from nichealthd.core.checks.link_counters import LINK_COUNTERS
from nichealthd.core.checks.link_flaps import LINK_FLAPS
from nichealthd.core.checks.link_section import EPOCH
from nichealthd.core.checks.link_state import LINK_STATE
from nichealthd.core.observed import DeviceIdentity
from nichealthd.core.state import HEALTHY, MonitorState, StateCorrupt, parse_state

from .golden_state import GOLDEN, GOLDEN_DRIVER, as_recorded

# ------------------------------------------------------------------ random sections

TEXT = string.ascii_letters + string.digits + ":_-./|> " + "äé°µ\"\\\n\t\u2028"
# What the declarations say a record must be (a breach read back not breached is dropped; an
# identity's rename is written only whole; an EFA port's health is one of three).
VALID: dict[type, Callable[[Any, random.Random], Any]] = {
    BreachFlag: lambda r, rng: dataclasses.replace(r, breached=True),
    DeviceIdentity: lambda r, rng: r if r.renamed_from and r.renamed_at else
    dataclasses.replace(r, renamed_from="", renamed_at=None),
    EfaPort: lambda r, rng: dataclasses.replace(r, health=rng.choice(
        ("healthy", "fatal", "suppressed"))),
}


def text(rng: random.Random) -> str:
    return "".join(rng.choice(TEXT) for _ in range(rng.randrange(0, 12)))


def moment(rng: random.Random) -> datetime:
    """Any time of years 1970-9999, to the second, the millisecond or the microsecond."""
    start = datetime(1970, 1, 1, tzinfo=timezone.utc)
    seconds = rng.randrange(int((datetime(9999, 12, 31, tzinfo=timezone.utc) - start)
                                .total_seconds()))
    micros = rng.choice((0, rng.randrange(1000) * 1000, rng.randrange(1_000_000)))
    return start + timedelta(seconds=seconds, microseconds=micros)


def number(rng: random.Random, high: int) -> int:
    return rng.choice((0, high - 1, rng.randrange(min(high, 1000)), rng.randrange(high)))


def value(tp: Any, how: codec.Stored, rng: random.Random, depth: int = 0) -> Any:
    """A random value of type ``tp`` as the field ``how`` declares it."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    size = rng.randrange(0, 4 if depth < 2 else 2)
    if tp is int:
        return number(rng, how.high)
    if tp is bool:
        return rng.random() < 0.5
    if tp is float:
        return rng.choice((0.0, 2.4e-4, rng.random()))
    if tp is str:
        return text(rng)
    if tp is datetime:
        return moment(rng)
    if origin is Union:
        inner = args[0] if args[1] is type(None) else args[1]
        return None if rng.random() < 0.3 else value(inner, how, rng, depth)
    if origin in (dict, typing.get_origin(typing.Mapping[str, int])):
        return {text(rng): value(args[1], how, rng, depth + 1) for _ in range(size)}
    if origin is list:
        items = [value(args[0], how, rng, depth + 1) for _ in range(size)]
        return sorted(items) if how.sort else items
    if origin is tuple and args[-1] is Ellipsis:
        return tuple(value(args[0], how, rng, depth + 1) for _ in range(size))
    if origin is tuple:
        return tuple(value(a, how, rng, depth + 1) for a in args)
    return record(tp, rng, depth + 1)


def record(cls: Any, rng: random.Random, depth: int = 0) -> Any:
    """A random instance of a section or record class, valid as its declarations say."""
    hints = typing.get_type_hints(cls)
    if hasattr(cls, "_fields"):  # a NamedTuple
        made = cls(*(value(hints[n], codec.Stored(), rng, depth) for n in cls._fields))
    else:
        made = cls(**{f.name: value(hints[f.name], f.metadata.get(codec.META, codec.Stored()),
                                    rng, depth) for f in dataclasses.fields(cls)})
    fix = VALID.get(cls)
    return fix(made, rng) if fix else made


SECTIONS = sorted({f.section_type for f in families()}, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", SECTIONS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("seed", range(25))
def test_every_section_with_random_content_round_trips(cls: Any, seed: int) -> None:
    section = record(cls, random.Random(f"{cls.__name__}-{seed}"))
    written = json.dumps(section.to_json())
    back = cls.from_json(json.loads(written))
    assert back == section
    assert json.dumps(back.to_json()) == written
    assert set(json.loads(written)) <= set(cls.keys())
    copied = section.copy()
    assert copied == section and type(copied) is cls


@pytest.mark.parametrize("seed", range(5))
def test_a_whole_state_with_random_sections_round_trips_through_the_file_format(
        seed: int) -> None:
    rng = random.Random(seed)
    state = MonitorState(text(rng), number(rng, codec.MAX_SEQ),
                         sections={f.id: record(f.section_type, rng) for f in families()})
    loaded, notes = parse_state(json.loads(json.dumps(state.to_json())))
    assert loaded == state and notes == ()


def test_a_copy_shares_no_container_with_its_original() -> None:
    section = record(LINK_STATE.section_type, random.Random(1))
    copied = section.copy()
    copied.port_states["new"] = next(iter(section.port_states.values()), None)
    copied.known_devices.append("new")
    assert "new" not in section.port_states and "new" not in section.known_devices


# ------------------------------------------------------------------ malformed fields

def golden(driver: bool = False) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((GOLDEN_DRIVER if driver else GOLDEN).read_text())
    return loaded


def edited(path: tuple[Any, ...], new: Any, driver: bool = False) -> dict[str, Any]:
    """The state file of main with the value at ``path`` replaced (``DELETE``: removed)."""
    data = golden(driver)
    node = data
    for key in path[:-1]:
        node = node[key]
    if new is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = copy.deepcopy(new)
    return data


DELETE = object()
PORT = ("port_states", "mlx5_0_1")
BREACH = ("breach_flags", "mlx5_1:1:port_rcv_errors")
CYCLES = ("link_flaps", "mlx5_4_1", "cycles")
REPEAT = ("kernel_log", "repeats", "netdev_watchdog|mlx5_0")
IDENTITY = ("device_identities", "mlx5_20")
TS = "2026-01-01T12:00:00Z"

# (where, what kind of field, the malformed values); driver: the file with driver events.
MALFORMED: list[tuple[tuple[Any, ...], str, list[Any], bool]] = [
    ((*PORT, "misses"), "int", [-1, 2**64, "0", True, 1.5, None, [0]], False),
    ((*PORT, "port"), "int below 2^16", [2**16, -1], False),
    (("efa_device_misses", "rdmap48s27"), "int below 2^20", [1 << 20], False),
    (("efa_ports", "efa_0_1", "carrier"), "Optional[int] below 2", [2, -1, "1", False], False),
    (("counter_snapshots", "mlx5_0:1:symbol_error", "value"), "NamedTuple int",
     [-5, 2**80, "5"], False),
    ((*BREACH, "is_fatal"), "bool", [0, "true", None, 1], False),
    ((*BREACH, "breached"), "bool with a legacy value", [0, None], False),
    ((*PORT, "state"), "str", [4, None, [], {}], False),
    (("missing_devices", "mlx5_7", "since"), "datetime",
     [0, "yesterday", "0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "2026-13-40T00:00:00Z",
      "9999-12-31T23:59:59-05:00", None], False),
    (("counter_snapshots", "mlx5_0:1:symbol_error", "timestamp"), "NamedTuple datetime",
     ["0001-01-01T00:00:00+05:00", 17], False),
    ((*BREACH, "last_value"), "omitted when None: null is no value", [None, -1], False),
    ((*IDENTITY, "renamed_at"), "omitted when None: null is no time", [None, "then"], False),
    (("card_pending",), "dict of datetimes", [[], "x", 1, None], False),
    (("card_pending", "0000:11:00"), "dict item", [17, None], False),
    (("port_states",), "dict of records", [[], "x"], False),
    (PORT, "record", [[], "x", 5, None], False),
    (("known_devices",), "list (sorted)", [{"mlx5_0": 1}, "mlx5_0", None], False),
    (("known_devices", 0), "list item", [1, None], False),
    (("fabric_events", "fe80:0000:0000:0000/0x2", "devices"), "tuple[str, ...]",
     ["mlx5_8", [1], {}], False),
    ((*REPEAT, "told", "entities", 0), "tuple[str, str]",
     [["NIC"], ["NIC", "x", "y"], [1, "x"], "NIC:x"], False),
    ((*REPEAT, "told"), "Optional record", [[], "x", 1], False),
    (("driver_event",), "Optional record", [[], "x", 1], True),
    (("driver_event", "left"), "Mapping of datetimes", [[], {"mlx5_0": 1}], True),
    (CYCLES, "flap cycles (hook)", [{}, "x", None], False),
    ((*CYCLES, 0), "a cycle (hook)", [[TS], "x", [TS, -1], [TS, 1, "yes"], [1, 1, True]], False),
    (("efa_ports", "efa_0_1", "health"), "str checked after reading", ["sick", 1], False),
    (("efa_driver_event",), "EFA driver event (hook)", [{"since": TS}, [1], "x"], True),
    (("kernel_log",), "nested section", [[], "x", 1], False),
    (("kernel_log", "cursor"), "str in the nested section", [1, None], False),
    (("aer_breach_flags", "0000:19:00.0:0:aer_dev_fatal", "check_name"), "prefixed section",
     [1, None], False),
    (("nic_temperature_alerts", "0000:19:00.0/hwmon3/temp1", "is_fatal"),
     "record under a key of its own", ["no"], False),
    (("char_device_cleared",), "bool of a latch section", [1, "false", None], False),
    (("firmware_versions", "mlx5_7"), "dict of str", [28, None], False),
    (("lost_nic_since", "0000:49:00.0"), "dict of datetimes", ["soon"], False),
    (("efa_breach_flags", "rdmap32s27:1:rx_drops", "last_value"), "EFA counter section",
     [-1, "1"], False),
]
CASES = [pytest.param(path, bad, driver, id=f"{kind}: {'/'.join(map(str, path))} = {bad!r}")
         for path, kind, values, driver in MALFORMED for bad in values]
REQUIRED = [(*PORT, "device"), (*BREACH, "check_name"), (*CYCLES[:2], "down_seen"), CYCLES,
            (*REPEAT, "times"), ("missing_devices", "mlx5_7", "since"),
            ("counter_snapshots", "mlx5_0:1:symbol_error", "timestamp"),
            ("efa_ports", "efa_0_1", "health"), ("port_holds", "mlx5_6_1", "state"),
            ("char_device_latched", "mlx5_1:1:umad", "since"),
            ("pcie_degraded_links", "0000:17:01.0>0000:19:00.0", "pci_address"),
            ("kernel_log", "faults", "mlx5_0", "line"), (*REPEAT, "told", "since"),
            ("rate_degraded", "mlx5_6_1", "peers")]


@pytest.mark.parametrize("path,bad,driver", CASES)
def test_a_malformed_field_makes_the_state_corrupt(path: tuple[Any, ...], bad: Any,
                                                   driver: bool) -> None:
    with pytest.raises(StateCorrupt):
        parse_state(edited(path, bad, driver))


@pytest.mark.parametrize("path", REQUIRED, ids=lambda p: "/".join(map(str, p)))
def test_a_record_without_a_key_it_needs_makes_the_state_corrupt(path: tuple[Any, ...]
                                                                 ) -> None:
    with pytest.raises(StateCorrupt, match="KeyError"):
        parse_state(edited(path, DELETE))


def test_the_message_names_the_key_of_the_section() -> None:
    with pytest.raises(StateCorrupt, match="port_states: .*expected an integer"):
        parse_state(edited((*PORT, "misses"), "0"))


def test_the_bounds_are_inclusive_below_and_exclusive_above() -> None:
    for path, good in (((*PORT, "port"), 2**16 - 1), ((*PORT, "misses"), 2**64 - 1),
                       (("efa_ports", "efa_0_1", "carrier"), None),
                       (("missing_devices", "mlx5_7", "since"), "9999-12-31T23:59:59Z"),
                       (("missing_devices", "mlx5_7", "since"), "1970-01-01T00:00:00+00:00")):
        parse_state(edited(path, good))


# ------------------------------------------------------------------ legacy and unknown keys

def section_after(path: tuple[Any, ...], new: Any, family: Any, driver: bool = False) -> Any:
    return parse_state(edited(path, new, driver))[0].section(family)


def test_keys_older_files_lack_read_as_their_legacy_values() -> None:
    port = section_after((*PORT, "misses"), DELETE, LINK_STATE).port_states["mlx5_0_1"]
    assert port.misses == 0
    for key, expected in (("link_layer", ""), ("health", HEALTHY), ("since", EPOCH)):
        port = section_after((*PORT, key), DELETE, LINK_STATE).port_states["mlx5_0_1"]
        assert getattr(port, key) == expected
    flag = section_after((*BREACH, "last_value"), DELETE, LINK_COUNTERS).breach_flags
    assert flag["mlx5_1:1:port_rcv_errors"].last_value is None
    identity = section_after((*IDENTITY, "renamed_at"), DELETE, LINK_STATE).identities
    assert identity["mlx5_20"].renamed_at is None
    flap = section_after((*CYCLES[:2], "outage_fatal"), DELETE, LINK_FLAPS).link_flaps
    assert flap["mlx5_4_1"].outage_fatal is False
    two = section_after((*CYCLES, 0), [TS, 2], LINK_FLAPS).link_flaps["mlx5_4_1"].cycles[0]
    assert two == (datetime(2026, 1, 1, 12, tzinfo=timezone.utc), 2, False)
    assert section_after((*REPEAT, "told"), DELETE, KERNEL_LOG).repeats[REPEAT[-1]].told is None
    carrier = section_after(("efa_ports", "efa_0_1", "carrier"), DELETE, EFA_STATE).ports
    assert carrier["efa_0_1"].carrier is None


def test_a_driver_event_of_before_told_and_left_told_every_device_once_reported() -> None:
    before = golden(True)["driver_event"]
    event = section_after(("driver_event", "told"), DELETE, LINK_STATE, True).driver_event
    assert event.told == tuple(before["devices"]) and before["reported"]
    data = edited(("driver_event", "told"), DELETE, True)
    data["driver_event"].update(reported=False)
    del data["driver_event"]["left"]
    event = parse_state(data)[0].section(LINK_STATE).driver_event
    assert event is not None and (event.told, dict(event.left)) == ((), {})


def test_a_breach_written_as_not_breached_is_no_breach() -> None:
    flags = section_after((*BREACH, "breached"), False, LINK_COUNTERS).breach_flags
    assert "mlx5_1:1:port_rcv_errors" not in flags


def test_an_empty_efa_driver_event_is_none() -> None:
    empty: Any
    for empty in ({}, None):
        assert section_after(("efa_driver_event",), empty, EFA_STATE, True).driver_event is None


def test_unknown_keys_are_read_past_and_not_written_back() -> None:
    data = golden()
    data["added_by_a_newer_version"] = {"x": 1}
    data["port_states"]["mlx5_0_1"]["new_field"] = [1, 2]
    data["kernel_log"]["new_table"] = {}
    data["link_flaps"]["mlx5_4_1"]["cycles"][0].append("a fourth item")
    state, _ = parse_state(data)
    assert as_recorded(state.to_json()) == golden()


def test_a_section_class_that_the_codec_cannot_write_is_refused_at_once() -> None:
    @dataclasses.dataclass
    class Odd(codec.Section):
        value: set[str] = dataclasses.field(default_factory=set)

    with pytest.raises(TypeError, match="cannot read"):
        Odd.keys()


def test_a_field_hook_reads_and_writes_instead_of_the_type() -> None:
    @dataclasses.dataclass
    class Hooked(codec.Section):
        LAYOUT = codec.Layout(prefix="x_", order=("b", "a"))

        a: int = dataclasses.field(default=0, metadata=codec.stored(
            key="first", parse=lambda raw: int(str(raw), 16), format=lambda v: f"{v:x}"))
        b: Optional[str] = dataclasses.field(default=None, metadata=codec.stored(
            after=lambda v: v.upper() if v else v))

    assert Hooked.keys() == ("x_b", "x_first")
    assert list(codec.dump(Hooked(255, "B"))) == ["x_b", "x_first"]
    assert codec.dump(Hooked(255, "B")) == {"x_b": "B", "x_first": "ff"}
    assert codec.load(Hooked, {"x_first": "ff", "x_b": "b"}) == Hooked(255, "B")
    assert codec.load(Hooked, {}) == Hooked()


def test_a_float_is_any_finite_number() -> None:
    @dataclasses.dataclass
    class Rated(codec.Section):
        rate: float = 0.0

    assert codec.load(Rated, {"rate": 2}) == Rated(2.0) and codec.dump(Rated(2.5)) == {
        "rate": 2.5}
    for bad in (True, "1", float("nan"), float("inf"), None):
        with pytest.raises(TypeError):
            codec.load(Rated, {"rate": bad})


def test_a_section_field_without_a_default_must_be_in_the_file() -> None:
    @dataclasses.dataclass
    class Needy(codec.Section):
        needed: int

    assert codec.load(Needy, {"needed": 1}) == Needy(1)
    with pytest.raises(KeyError):
        codec.load(Needy, {})
