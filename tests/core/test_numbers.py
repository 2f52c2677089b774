"""The one parser of numbers (core.numbers): every kind's range, garbage never raises."""

from __future__ import annotations

import random

import pytest

from nichealthd.core import numbers
from nichealthd.core.numbers import (
    AER_TOTAL,
    CRITICAL_TEMPERATURE,
    NUMA_NODE,
    PCI_CLASS,
    PCIE_WIDTH,
    TEMPERATURE,
    Kind,
    RateGate,
    Unreadable,
    counter,
    parse,
    value,
)


@pytest.mark.parametrize("raw,kind,expected", [
    (b"42\n", counter(64), 42), (b"0", counter(64), 0),
    (b"18446744073709551615\n", counter(64), 2**64 - 1),
    (b"5\n3\n", counter(64), 5),  # a shorter value written over a longer one in place
    (b"65535\n", counter(16), 65535), ("-1", NUMA_NODE, -1), ("0x030200\n", PCI_CLASS, 0x030200),
    ("030200", PCI_CLASS, 0x030200), ("105000\n", CRITICAL_TEMPERATURE, 105000),
    ("0\n", CRITICAL_TEMPERATURE, 0), ("45000", TEMPERATURE, 45000), ("16", PCIE_WIDTH, 16),
])
def test_numbers_of_their_kind(raw: object, kind: Kind, expected: int) -> None:
    assert parse(raw, kind) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("raw,kind,reason", [
    (b"18446744073709551616\n", counter(64),
     "out of range for a 64-bit counter (0 to 18446744073709551615): '18446744073709551616'"),
    (b"65536\n", counter(16), "out of range for a 16-bit counter (0 to 65535): '65536'"),
    (b"-1\n", counter(64), "not a 64-bit counter: '-1'"),
    (b"", counter(64), "empty"), (b"\n", counter(64), "empty"),
    (b"12abc\n", counter(64), "not a 64-bit counter: '12abc'"),
    (b"\xff\xfe", counter(64), "not ASCII text"), ("²", counter(64), "not ASCII text"),
    ("١", counter(64), "not ASCII text"), ("1_0", counter(64), "not a 64-bit counter: '1_0'"),
    ("+1", counter(64), "not a 64-bit counter: '+1'"), ("1e3", counter(64),
                                                         "not a 64-bit counter: '1e3'"),
    ("--1", NUMA_NODE, "not a NUMA node: '--1'"), ("-", NUMA_NODE, "not a NUMA node: '-'"),
    ("1024", NUMA_NODE, "out of range for a NUMA node (-1 to 1023): '1024'"),
    ("99999999999999999999999999", AER_TOTAL,
     "out of range for an AER total (0 to 18446744073709551615): 26 digits"),
    ("9" * 5000, AER_TOTAL, "out of range for an AER total (0 to 18446744073709551615): "
     "5000 digits"),
    ("0" * 5000 + "1", AER_TOTAL, "out of range for an AER total (0 to 18446744073709551615): "
     "5001 digits"),
    ("1", CRITICAL_TEMPERATURE, "out of range for a critical temperature in m°C "
     "(60000 to 150000 or 0): '1'"),
    ("3", PCIE_WIDTH, "out of range for a PCIe link width (0, 1, 2, 4, 8, 12, 16, 32): '3'"),
])
def test_anything_else_is_unreadable_with_the_reason(raw: object, kind: Kind,
                                                     reason: str) -> None:
    assert parse(raw, kind) == Unreadable(reason)  # type: ignore[arg-type]
    assert value(raw, kind) is None  # type: ignore[arg-type]


KINDS = [getattr(numbers, name) for name in dir(numbers)
         if isinstance(getattr(numbers, name), Kind)] + [counter(w) for w in (4, 8, 16, 32, 64)]


def garbage(rng: random.Random) -> bytes:
    """Bytes a broken or hostile file may hold: huge, negative, non-ASCII, non-numeric."""
    pick = rng.randrange(8)
    if pick == 0:
        digits = rng.randrange(1, 6000)
        return ("".join(rng.choice("0123456789") for _ in range(digits))).encode()
    if pick == 1:
        return f"-{rng.randrange(10 ** rng.randrange(1, 40))}".encode()
    if pick == 2:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64)))
    if pick == 3:
        return rng.choice(["١٢", "²", "1_000", "0x", "-0x1", "nan", "inf", "1e99", " ",
                           "\x00", "0x" + "f" * 300]).encode()
    if pick == 4:
        return f"{rng.randrange(2**70):x}".encode()
    if pick == 5:
        return ("9" * rng.randrange(1, 30) + "\n" + "x" * rng.randrange(10)).encode()
    if pick == 6:
        return f"{rng.choice(['', '-', '--', '+'])}{rng.randrange(2**66)}\n".encode()
    return "".join(chr(rng.randrange(0x110000 if rng.random() < 0.2 else 128))
                   for _ in range(rng.randrange(20))).encode("utf-8", "surrogatepass")


def test_the_parser_never_raises_and_never_leaves_its_kind() -> None:
    rng = random.Random(39)
    for _ in range(20_000):
        raw = garbage(rng)
        kind = rng.choice(KINDS)
        for form in (raw, raw.decode("latin-1")):
            number = parse(form, kind)
            assert isinstance(number, Unreadable) or kind.holds(number), (form[:60], kind)


def test_an_aer_total_rises_no_faster_than_the_kernel_counts() -> None:
    now = [600.0]  # ten minutes after boot
    gate = RateGate(lambda: now[0])
    limit = numbers.AER_MAX_PER_SECOND
    assert gate.check("f", 2**63, AER_TOTAL) == Unreadable(
        f"rose by {2**63} in 600 s: more than an AER total can ({limit} per second)")
    assert gate.check("f", 5, AER_TOTAL) == 5  # plausible since boot
    now[0] += 10
    assert isinstance(gate.check("f", 5 + 10 * limit + 1, AER_TOTAL), Unreadable)
    assert gate.check("f", 5 + 10 * limit, AER_TOTAL) == 5 + 10 * limit
    assert gate.check("f", 0, AER_TOTAL) == 0  # a reset is a value, judged as a reset
    now[0] += 3600  # a rejected rise becomes plausible once enough time has passed
    assert gate.check("f", 10 * limit, AER_TOTAL) == 10 * limit
    gate.retain(set())
    assert gate.check("f", 10 * limit, AER_TOTAL) == 10 * limit  # since boot again
