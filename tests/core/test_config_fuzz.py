"""Fuzz test of the config loader: hundreds of generated files, each either a valid
Config within every bound or a ConfigError naming the file; never any other exception. A
sample goes through the real programs: exit 2, no traceback.

The seed is fixed so that a failure reproduces; NICHEALTHD_FUZZ_SEED picks another.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Tuple

from nichealthd.core.config import THRESHOLD_MAX, Config, ConfigError
from nichealthd.core.config_build import declarations, value_of
from nichealthd.sim import tree
from nichealthd.sources.config_file import load_config

REPO = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("NICHEALTHD_FUZZ_SEED", "20261123"))
CASES = 600
KEY_LINE = re.compile(r"^(\s*)([A-Za-z0-9_.\"-]+)(\s*=\s*)(.*)$")


def shipped_config() -> str:
    """The packaged file with every key and example uncommented."""
    lines = []
    for line in (REPO / "etc/nichealthd/config.toml").read_text().splitlines():
        if re.match(r"^#(\[|\w+ = )", line):
            lines.append(line[1:])
    return "\n".join(lines) + "\n"


def sim_config(tmp: Path) -> str:
    return str(tree._config(tmp, "fuzz-node"))


BASES: List[Callable[[Path], str]] = [
    lambda _: shipped_config(),
    sim_config,
    lambda _: ('pollingInterval = "500ms"\ncardVerdictHoldTime = 0\noutboxMaxEvents = 10\n'
               '[counterDetection]\nenabled = true\n[[counterDetection.counters]]\n'
               'name = "custom"\npath = "hw_counters/custom"\nthresholdType = "velocity"\n'
               'threshold = 3\nvelocityUnit = "minute"\n'),
]


def nested(rng: random.Random, depth: int) -> str:
    if rng.random() < 0.5:
        return "[" * depth + "1" + "]" * depth
    return "{a = " * depth + "1" + "}" * depth


def random_value(rng: random.Random) -> str:
    """A TOML value of a random type (or something that is not TOML at all)."""
    pool: List[Callable[[], str]] = [
        lambda: rng.choice(["nan", "+nan", "-nan", "inf", "+inf", "-inf"]),
        lambda: rng.choice(["1e308", "-1e308", "1e-308", "0", "-0", "-1", "0.0", "1.5"]),
        lambda: str(rng.choice([1, -1]) * rng.randrange(10 ** rng.randint(1, 60))),
        lambda: "9" * rng.choice([19, 20, 400, 4400]),
        lambda: rng.choice(['"1s"', '"0.000001ms"', '"1e308s"', '"-1s"', '"10h"', '"0ms"',
                            '"soon"', '""', '"ms"', '" 5 m "']),
        lambda: rng.choice(['"\\u0000"', '"a\\u0000b"', '"\\t\\n"', '"\\u00e9\\u2603"',
                            '"' + "x" * rng.randint(100, 5000) + '"']),
        lambda: rng.choice(["true", "false"]),
        lambda: rng.choice(["[]", "[1, 2]", '["a", 1]', '["InfiniBandStateCheck"]', "[[]]"]),
        lambda: rng.choice(["{}", "{a = 1}", '{name = "x"}', "{a = {b = nan}}"]),
        lambda: nested(rng, rng.choice([2, 50, 500, 3000, 6000])),
        lambda: rng.choice(["1979-05-27T07:32:00Z", "1979-05-27", "07:32:00",
                            "0001-01-01T00:00:00"]),
        lambda: rng.choice(["'(['", "'^veth.*'", "'" + "(" * 2000 + ")" * 2000 + "'",
                            "':2112'", "':99999'", "'[::1]:2112'"]),
        lambda: rng.choice(["=", "[", "{", '"unterminated', "'''", "0x", "1__0", "nan nan"]),
    ]
    return rng.choice(pool)()


def typo(rng: random.Random, key: str) -> str:
    chars = list(key)
    index = rng.randrange(len(chars))
    operation = rng.randrange(3)
    if operation == 0:
        del chars[index]
    elif operation == 1:
        chars.insert(index, rng.choice("abcxyz_"))
    else:
        chars[index] = chars[index].swapcase()
    return "".join(chars) or "x"


def mutate(rng: random.Random, text: str) -> Tuple[str, bytes]:
    """One mutation of a valid file: (kind, bytes of the new file)."""
    lines = text.splitlines()
    key_lines = [i for i, line in enumerate(lines) if KEY_LINE.match(line)]
    kind = rng.choice(["value", "value", "value", "typo", "bytes", "truncate", "duplicate",
                       "header", "shuffle", "garbage", "values"])
    if kind in ("value", "values") and key_lines:
        for _ in range(1 if kind == "value" else rng.randint(2, 6)):
            i = rng.choice(key_lines)
            match = KEY_LINE.match(lines[i])
            assert match is not None
            lines[i] = match.group(1) + match.group(2) + match.group(3) + random_value(rng)
    elif kind == "typo" and key_lines:
        i = rng.choice(key_lines)
        match = KEY_LINE.match(lines[i])
        assert match is not None
        lines[i] = match.group(1) + typo(rng, match.group(2)) + match.group(3) + match.group(4)
    elif kind == "duplicate" and lines:
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
    elif kind == "header":
        lines.insert(rng.randint(0, len(lines)), rng.choice(
            ["[counterDetection]", "[[counterDetection.counters]]", "[counterDetection.x]",
             "[pollingInterval]", "[[counterDetection]]", "[a.b.c]", "[[x]]"]))
    elif kind == "shuffle":
        rng.shuffle(lines)
    data = ("\n".join(lines) + "\n").encode()
    if kind == "bytes":
        raw = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            position = rng.randrange(len(raw) + 1)
            if rng.random() < 0.5 and raw:
                del raw[min(position, len(raw) - 1)]
            else:
                raw[position:position] = bytes([rng.choice(
                    [0, 0xFF, 0xC3, 0x80, ord('"'), ord("["), ord("{"), ord("="), ord("\n"),
                     ord("\\"), rng.randrange(256)])])
        data = bytes(raw)
    elif kind == "truncate":
        data = data[:rng.randrange(len(data) + 1)]
    elif kind == "garbage":
        data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
    return kind, data


def check_valid(config: Config) -> None:
    """A Config that loaded is within every bound (nothing non-finite slipped through)."""
    for item in declarations():
        if item.bounds is not None:
            low, high = item.bounds
            value = value_of(config, item)
            assert math.isfinite(value) and low <= value <= high, (item.name, value)
    for spec in config.counters:
        assert math.isfinite(spec.threshold) and 0 <= spec.threshold <= THRESHOLD_MAX
        assert "\0" not in spec.path and "\0" not in spec.description
    for attr in ("state_file", "sysfs_root", "proc_root", "metadata_path", "node_name"):
        assert "\0" not in getattr(config, attr)
    assert not list(nul_strings(config)), list(nul_strings(config))


def nul_strings(value: Any, where: str = "config") -> Iterator[str]:
    """Where a string holding NUL hides in a loaded Config (nichealthd.toml(5): none may),
    kernel-log rules' regexes included."""
    if isinstance(value, str):
        if "\0" in value:
            yield where
    elif isinstance(value, re.Pattern):
        yield from nul_strings(value.pattern, where)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from nul_strings(getattr(value, f.name), f"{where}.{f.name}")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from nul_strings(item, f"{where}[{key!r}]")
    elif isinstance(value, (list, tuple, frozenset, set)):
        for index, item in enumerate(value):
            yield from nul_strings(item, f"{where}[{index}]")


def generate(tmp_path: Path) -> List[Tuple[str, bytes]]:
    rng = random.Random(SEED)
    bases = [base(tmp_path) for base in BASES]
    for base in bases:  # the starting points themselves are valid
        path = tmp_path / "base.toml"
        path.write_text(base)
        check_valid(load_config(str(path)))
    return [mutate(rng, rng.choice(bases)) for _ in range(CASES)]


def test_fuzzed_configs_load_or_fail_with_a_config_error(tmp_path: Path) -> None:
    outcomes: Dict[str, int] = {}
    path = tmp_path / "fuzz.toml"
    for number, (kind, data) in enumerate(generate(tmp_path)):
        path.write_bytes(data)
        try:
            config = load_config(str(path))
        except ConfigError as exc:
            assert exc.problems and all(m.startswith(f"{path}") for m in exc.messages)
            assert len(str(exc)) < 100 * 400, "a message must stay readable"
            outcomes[f"{kind} error"] = outcomes.get(f"{kind} error", 0) + 1
            continue
        except Exception as exc:  # the property: nothing else, ever
            raise AssertionError(f"case {number} (seed {SEED}, {kind}) raised "
                                 f"{type(exc).__name__}: {exc}; file: {data[:300]!r}") from exc
        check_valid(config)
        outcomes[f"{kind} ok"] = outcomes.get(f"{kind} ok", 0) + 1
    errors = sum(n for k, n in outcomes.items() if k.endswith("error"))
    # The generator is worth something: most files are invalid, some still valid.
    assert errors > CASES // 2 and errors < CASES, outcomes


def sample(tmp_path: Path) -> List[Tuple[str, Path]]:
    """One invalid file of a few mutation kinds, plus the special files."""
    chosen: Dict[str, Path] = {}
    for number, (kind, data) in enumerate(generate(tmp_path)):
        if kind in chosen or kind not in ("value", "values", "typo", "bytes", "garbage"):
            continue
        path = tmp_path / f"sample-{number}.toml"
        path.write_bytes(data)
        try:
            load_config(str(path))
        except ConfigError:
            chosen[kind] = path
            continue
        path.unlink()
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    chosen.update({"fifo": fifo, "device": Path("/dev/zero"), "directory": tmp_path})
    assert len(chosen) == 8, chosen
    return sorted(chosen.items())


def test_a_sample_through_the_real_programs(tmp_path: Path) -> None:
    for kind, path in sample(tmp_path):
        for program in (["nichealthd.cli.ctl", "config", "check", str(path)],
                        ["nichealthd.runtime.daemon", "--config", str(path), "--once"]):
            result = subprocess.run([sys.executable, "-m", *program], cwd=REPO,
                                    capture_output=True, text=True, timeout=60)
            output = result.stdout + result.stderr
            assert result.returncode == 2, (kind, program, output)
            assert "Traceback" not in output and str(path) in output, (kind, output)
