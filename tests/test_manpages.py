"""man/: the pages render cleanly and document exactly the programs' options and config keys.

The --help comparisons run the real programs; they are skipped (with the reason) only while
``nichealthd.runtime.daemon`` / ``nichealthd.cli.ctl`` cannot be imported. The other checks
compare the pages with the external contract (the options of nichealthd(8)), the shipped config
file and the config keys as the daemon and each check family declare them
(``nichealthd.core.config_build.declarations``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nichealthd.core.config_build import declarations

REPO = Path(__file__).resolve().parent.parent
MAN = REPO / "man"
PAGES = ["nichealthd.8", "nichealthctl.1", "nichealthd.toml.5", "nichealthd-sim.1"]
LONG_OPT = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")

# The documented options, plus the argparse standard --help.
DAEMON_FLAGS = {
    "--config", "--sysfs-root", "--proc-root", "--boot-id-path", "--state-file",
    "--metadata-path", "--topology-source", "--node-name", "--platform-connector-socket",
    "--platform-connector-token-path", "--processing-strategy", "--polling-interval",
    "--checks", "--metrics-listen", "--dbus", "--varlink-socket", "--event-log", "--once",
    "--check-config",
    "--log-level", "--version", "--help",
}  # fmt: skip
# Every top-level key: the daemon's own and each family's, with the man page section of each.
DECLARED = declarations()
SCALARS = [item for item in DECLARED if item.key.merge is None]
TABLES = [item for item in DECLARED if item.key.merge is not None]  # [[kernelLogRules]]
SECTIONS = sorted({item.section for item in DECLARED})
ALL_KEYS = {item.name for item in SCALARS}
CONFIG_KEYS = {item.name for item in SCALARS if item.section == "GENERAL KEYS"}
COUNTER_FIELDS = {
    "name", "path", "enabled", "isFatal", "thresholdType", "threshold", "velocityUnit",
    "description",
}  # fmt: skip
# link-counter-detection §10.2 (carrier_changes at its real sysfs location).
DEFAULT_COUNTERS = {
    "link_downed": ("counters/link_downed", "fatal", "delta > 0 per poll"),
    "excessive_buffer_overrun_errors": (
        "counters/excessive_buffer_overrun_errors", "fatal", "delta > 0 per poll"),
    "local_link_integrity_errors": (
        "counters/local_link_integrity_errors", "fatal", "delta > 0 per poll"),
    "rnr_nak_retry_err": ("hw_counters/rnr_nak_retry_err", "fatal", "delta > 0 per poll"),
    "symbol_error": ("counters/symbol_error", "non-fatal", "rate > 10 per second"),
    "symbol_error_fatal": ("counters/symbol_error", "fatal", "rate > 120 per hour"),
    "link_error_recovery": ("counters/link_error_recovery", "non-fatal", "rate > 5 per minute"),
    "port_rcv_errors": ("counters/port_rcv_errors", "non-fatal", "rate > 10 per second"),
    "out_of_sequence": ("hw_counters/out_of_sequence", "non-fatal", "rate > 100 per second"),
    "local_ack_timeout_err": (
        "hw_counters/local_ack_timeout_err", "non-fatal", "rate > 1 per second"),
    "port_xmit_discards": ("counters/port_xmit_discards", "non-fatal", "rate > 100 per second"),
    # off by default, as NVSentinel ships it (nichealthd.toml(5) says why)
    "port_xmit_wait": ("counters/port_xmit_wait", "non-fatal", "rate > 10000 per second",
                       "off"),
    "roce_slow_restart": ("hw_counters/roce_slow_restart", "non-fatal", "rate > 10 per second"),
    "carrier_changes": (
        "/sys/class/net/{interface}/carrier_changes", "non-fatal", "delta > 2 per poll"),
}  # fmt: skip


def roff(page: str) -> str:
    """The page's source with roff escapes that matter here undone."""
    text = (MAN / page).read_text()
    return text.replace("\\-", "-").replace("\\(dq", '"').replace("\\e", "\\")


def section(page: str, name: str) -> str:
    text = roff(page)
    m = re.search(rf"^\.SH {re.escape(name)}\n(.*?)(?=^\.SH |\Z)", text, re.S | re.M)
    assert m, f"{page} has no {name} section"
    return m.group(1)


def long_options(text: str) -> set:
    return set(LONG_OPT.findall(text))


@pytest.mark.parametrize("page", PAGES)
def test_page_renders_without_warnings(page):
    man = shutil.which("man")
    if man is None:
        pytest.skip("man-db not installed (.ci/system-deps.sh installs it)")
    env = dict(os.environ, LC_ALL="C.UTF-8", MANWIDTH="80")
    res = subprocess.run(
        [man, "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", str(MAN / page)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert res.returncode == 0 and res.stderr == "", res.stderr
    head = (MAN / page).read_text().splitlines()
    title = [line for line in head if line.startswith(".TH ")][0].split()
    assert title[2] == page.rsplit(".", 1)[1]


def test_daemon_page_documents_the_contract_flags():
    assert long_options(section("nichealthd.8", "OPTIONS")) == DAEMON_FLAGS
    for name in ("SIGTERM", "SIGINT", "SIGHUP"):
        assert name in section("nichealthd.8", "SIGNALS")
    status = section("nichealthd.8", "EXIT STATUS")
    for code in ("0", "1", "2"):
        assert f".B {code}\n" in status
    files = section("nichealthd.8", "FILES")
    for path in ("/etc/nichealthd/config.toml", "/var/lib/nichealthd/state.json"):
        assert path in files


def test_ctl_page_documents_commands_json_keys_and_exit_codes():
    text = roff("nichealthctl.1")
    for cmd in ("status", "show ports", "show devices", "show counters", "events", "check",
                "reload", "config check"):  # fmt: skip
        assert f"\n.B {cmd}" in text or f'\n.BR "{cmd}' in text or f".BR {cmd} " in text, cmd
    json_section = section("nichealthctl.1", "JSON OUTPUT")
    for key in ("device", "port", "link_layer", "state", "phys_state", "healthy", "fatal",
                "role", "counter", "value", "breached", "generatedTimestamp",
                "entitiesImpacted", "recommendedAction", "processingStrategy"):  # fmt: skip
        assert re.search(rf"\b{key}\b", json_section), key
    status = section("nichealthctl.1", "EXIT STATUS")
    for code in ("0", "1", "2", "3"):
        assert f".B {code}\n" in status


def documented_config_keys() -> set:
    text = section("nichealthd.toml.5", "GENERAL KEYS")
    return set(re.findall(r"^\.BR (\w+) \" = ", text, re.M))


def shipped_config_keys() -> set:
    text = (REPO / "etc/nichealthd/config.toml").read_text()
    keys = set()
    in_counter_examples = False
    for line in text.splitlines():
        if line.startswith("#[counterDetection") or line.startswith("#[[counterDetection"):
            in_counter_examples = True
        if line.startswith("#[[kernelLogRules"):  # examples until the next block
            in_counter_examples = True
        if line.startswith("# --- Counter detection"):
            in_counter_examples = False
        m = re.match(r"^#(\w+) = ", line)
        if m and not in_counter_examples:
            keys.add(m.group(1))
    return keys


def test_toml_page_and_shipped_config_list_every_key():
    assert documented_config_keys() == CONFIG_KEYS
    assert shipped_config_keys() == ALL_KEYS
    for name in SECTIONS:
        text = section("nichealthd.toml.5", name)
        assert set(re.findall(r"^\.BR (\w+) \" = ", text, re.M)) \
            == {item.name for item in SCALARS if item.section == name}, name
    counters = section("nichealthd.toml.5", "COUNTER DETECTION")
    for field in COUNTER_FIELDS:
        assert re.search(rf"^\.BR? {field}\b", counters, re.M), field


def key_paragraph(item: Any) -> str:
    """The text of a declared key's paragraph in its section, as a reader sees it: font
    requests and escapes undone, on one line."""
    text = section("nichealthd.toml.5", item.section)
    head = (rf'\.BR {item.name} " = [^\n]*' if item.key.merge is None
            else rf"\.B \[\[{item.name}\]\]")
    m = re.search(rf"^{head}\n(.*?)(?=^\.TP|^\.SH|\Z)", text, re.S | re.M)
    assert m, item.name
    words = []
    for line in m.group(1).splitlines():
        font = re.match(r"^\.(B|I|BR|RB|IR|RI|IB|BI) (.*)$", line)
        if font:  # one argument in one font, or alternating fonts without spaces between
            parts = [a or b for a, b in re.findall(r'"([^"]*)"|(\S+)', font.group(2))]
            line = (" " if len(font.group(1)) == 1 else "").join(parts)
        elif line.startswith("."):
            continue
        words.append(line)
    text = re.sub(r"\\f[BIRP]", "", " ".join(words)).replace("\\(en", "\u2013")
    return " ".join(text.split())


@pytest.mark.parametrize("item", DECLARED, ids=[item.name for item in DECLARED])
def test_each_key_carries_its_man_page_line(item: Any) -> None:
    """The one line a declaration carries is what the man page says of the key."""
    assert item.key.doc in key_paragraph(item), (item.key.doc, key_paragraph(item))


REQUEST_AT_END = re.compile(r"\S\.(TP|PP|LP|IP|SH|SS|RS|RE|TH|nf|fi)\s*$")


@pytest.mark.parametrize("page", PAGES)
def test_every_request_starts_its_own_line(page):
    """A request glued to the end of a text line (``event..TP``) is printed as text, and the
    paragraph it should have started runs into the one before: nicTemperatureInterval was
    swallowed so."""
    for number, line in enumerate((MAN / page).read_text().splitlines(), 1):
        if not line.startswith((".", "'")):
            assert not REQUEST_AT_END.search(line), f"{page}:{number}: {line}"


def test_every_general_key_is_a_tagged_paragraph():
    lines = section("nichealthd.toml.5", "GENERAL KEYS").splitlines()
    for i, line in enumerate(lines):
        if re.match(r'^\.BR \w+ " = ', line):
            assert lines[i - 1] == ".TP", (lines[i - 1], line)


def test_toml_page_default_counter_table():
    text = section("nichealthd.toml.5", "COUNTER DETECTION")
    entries = re.findall(r"^\.TP\n\.B (\w+)\n\.IR (\S+) ;\n([\w-]+), \w+: ([^.(]+?)"
                         r"( \(off by default\))?\.$", text, re.M)
    table = {name: (path, sev, cond, *(("off",) if off else ()))
             for name, path, sev, cond, off in entries}
    assert table == DEFAULT_COUNTERS


def test_shipped_config_defaults_match_the_toml_page():
    """Uncommenting every general key of the shipped file gives the documented defaults."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        tomllib = pytest.importorskip("tomli")
    text = (REPO / "etc/nichealthd/config.toml").read_text()
    lines = [ln[1:] for ln in text.splitlines() if re.match(r"^#\w+ = ", ln)]
    lines = [ln for ln in lines if ln.split(" = ")[0] in CONFIG_KEYS]
    shipped = tomllib.loads("\n".join(lines))
    page = section("nichealthd.toml.5", "GENERAL KEYS")
    for key, value in shipped.items():
        m = re.search(rf'^\.BR {key} " = (.*)"$', page, re.M)
        assert m, key
        doc = m.group(1)
        if isinstance(value, str) and doc.startswith('"') and "<" not in doc:
            assert doc == f'"{value}"', key
        elif isinstance(value, bool):  # before int: a bool is one
            assert doc == str(value).lower(), key
        elif isinstance(value, int):
            assert doc == str(value), key


# --- against the real programs ---------------------------------------------------------------


def run_help(module: str, func: str, argv: list) -> str:
    code = (
        f"import sys; from {module} import {func} as m; sys.argv = {argv!r}; "
        "r = m(); sys.exit(r if isinstance(r, int) else 0)"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert res.returncode == 0, f"{argv} --help failed:\n{res.stdout}{res.stderr}"
    return res.stdout


def needs(module: str):
    try:
        found = importlib.util.find_spec(module) is not None
    except ImportError:
        found = False
    return pytest.mark.skipif(not found, reason=f"{module} not importable yet")


@needs("nichealthd.runtime.daemon")
def test_daemon_help_matches_man_page():
    help_opts = long_options(
        run_help("nichealthd.runtime.daemon", "main", ["nichealthd", "--help"]))
    man_all = long_options(roff("nichealthd.8"))
    man_options = long_options(section("nichealthd.8", "OPTIONS"))
    assert help_opts - man_all == set(), "in --help but not in nichealthd.8"
    assert man_options - help_opts == set(), "in nichealthd.8 OPTIONS but not in --help"


CTL_COMMANDS = [
    [], ["status"], ["show", "ports"], ["show", "devices"], ["show", "counters"],
    ["events"], ["check"], ["reload"], ["config", "check"],
]  # fmt: skip


@needs("nichealthd.cli.ctl")
def test_ctl_help_matches_man_page():
    help_opts: set = set()
    for cmd in CTL_COMMANDS:
        out = run_help("nichealthd.cli.ctl", "main", ["nichealthctl", *cmd, "--help"])
        help_opts |= long_options(out)
    man_all = long_options(roff("nichealthctl.1"))
    man_options = long_options(
        section("nichealthctl.1", "OPTIONS") + section("nichealthctl.1", "COMMANDS")
    )
    assert help_opts - man_all == set(), "in --help but not in nichealthctl.1"
    assert man_options - help_opts == set(), "in nichealthctl.1 but not in any --help"


@needs("nichealthd.core.config")
def test_documented_defaults_are_the_daemons(tmp_path):
    """The shipped file, every key uncommented, loads to exactly the built-in defaults, and
    the man page's counter table is the daemon's DEFAULT_COUNTERS."""
    from nichealthd.core import config as cfg
    from nichealthd.core.config_build import settings_classes
    from nichealthd.sources.config_file import load_config

    text = (REPO / "etc/nichealthd/config.toml").read_text()
    lines = [ln[1:] for ln in text.splitlines() if re.match(r"^#\w+ = ", ln)]
    lines = [ln for ln in lines if ln.split(" = ")[0] in ALL_KEYS]
    lines += ["[counterDetection]", "enabled = true"]
    path = tmp_path / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    loaded = load_config(str(path), must_exist=True)
    defaults = load_config(None)
    assert not loaded.notices
    for field in type(defaults).__dataclass_fields__:
        if field in ("source", "notices"):
            continue
        same = getattr(loaded, field) == getattr(defaults, field)
        # bootIdPath / sysClass*Path are shown resolved from the roots; same effective path.
        if field.endswith("_setting"):
            prop = {"boot_id_path_setting": "boot_id_path"}.get(field, field[: -len("_setting")])
            same = getattr(loaded, prop) == getattr(defaults, prop)
        assert same, field
    for kind in settings_classes():  # each family's and surface's keys, at their defaults
        assert loaded.settings(kind) == defaults.settings(kind) == kind(), kind

    units = {"second": "second", "minute": "minute", "hour": "hour"}
    table = {}
    for c in cfg.DEFAULT_COUNTERS:
        thr = f"{c.threshold:g}"
        cond = (
            f"rate > {thr} per {units[c.velocity_unit]}"
            if c.threshold_type == "velocity"
            else f"delta > {thr} per poll"
        )
        table[c.name] = (c.path, "fatal" if c.is_fatal else "non-fatal", cond,
                         *(() if c.enabled else ("off",)))
    assert table == DEFAULT_COUNTERS


@needs("nichealthd.sim.cli")
def test_sim_page_lists_every_command():
    out = run_help("nichealthd.sim.cli", "main", ["nichealthd-sim", "--help"])
    block = out.split("COMMAND\n", 1)[1].split("\noptions:", 1)[0]
    commands = set(re.findall(r"^    ([a-z][a-z-]*)", block, re.M))
    documented = set(
        re.findall(r"^\.TP\n\.B ([a-z-]+)$", section("nichealthd-sim.1", "COMMANDS"), re.M)
    )
    assert commands == documented


@needs("nichealthd.cli.ctl")
def test_ctl_help_names_every_show_command():
    """``nichealthctl --help`` lists what ``show`` shows: each of its commands, by name."""
    top = run_help("nichealthd.cli.ctl", "main", ["nichealthctl", "--help"])
    line = re.search(r"^ +show +(.+)$", top, re.M)
    assert line, top
    show = run_help("nichealthd.cli.ctl", "main", ["nichealthctl", "show", "--help"])
    whats = set(re.findall(r"^    (\w+) ", show, re.M))
    assert {"ports", "devices", "counters", "pcie", "optics"} <= whats, show
    assert whats <= set(re.findall(r"\w+", line.group(1))), line.group(1)
