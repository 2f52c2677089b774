"""The kernel-log rules: which mlx5 driver messages are faults, and of which device.

Each rule is named, has an errorCode (its name unless configured), is fatal or not, has a
dedup window (gpud's: 5 min, 24 h for ACCESS_REG), and, when non-fatal, counts toward the
repetition of driver faults (``repeat``; ``kernelLogRepeatCount`` lines of it on one device
within ``kernelLogRepeatWindow``) unless switched off: ACCESS_REG failures are left out, as
NVSentinel's analyzer leaves them out of its RepeatedNICDriverError rule (restricted
functions log one for every counter read: noise, not a recurring fault). The built-in rules
are NVSentinel's eleven syslog NIC rules, written from the kernel's own message formats (the
driver source lines are cited at each rule). ``[[kernelLogRules]]`` entries of the config
file override a rule by name (any field), switch it off (``enabled = false``) or add a new
one. A rule with ``header`` is stateful: it matches only within ``headerLines`` kernel lines
after a line matching its header (a soft-lockup report followed by an mlx5 NAPI stack frame).

Attribution: the PCI address of the message (``mlx5_core 0000:19:00.0: ...``, as printed by
``dev_printk``) or a network interface name (``NETDEV WATCHDOG: eth0 (mlx5_core): ...``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from .config_errors import Collector, show
from .config_lines import KeyLines
from .duration import format_duration, parse_duration

RULES_TABLE = "kernelLogRules"
KERNEL_LOG_MODES = ("journal", "kmsg", "off")
FIVE_MINUTES = 300.0
ONE_DAY = 86400.0
WINDOW_BOUNDS = (0.0, 30 * ONE_DAY)
HEADER_LINES_BOUNDS = (1, 10_000)
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")

# dev_printk: "<driver> <bus id>: <text>"; netdev_printk: "<driver> <bus id> <ifname>: <text>"
# (drivers/base/core.c __dev_printk, net/core/dev.c __netdev_printk).
PCI_ADDRESS = re.compile(r"\b([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\b")
# netdev_printk's interface after the bus id ("mlx5_core 0000:08:00.1 enp8s0f1: TX timeout").
NETDEV_AFTER_PCI = re.compile(
    r"\b[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7] ([^\s:]{1,15}):")
# The pre-6.8 watchdog names the interface first: "NETDEV WATCHDOG: eth0 (mlx5_core): ..."
NETDEV_WATCHDOG_IFACE = re.compile(r"NETDEV WATCHDOG: ([^\s:]{1,15}) \(")


@dataclass(frozen=True)
class KernelRule:
    """One named kernel-log rule."""

    name: str
    regex: str
    is_fatal: bool = False
    window: float = FIVE_MINUTES  # dedup window per device (seconds); 0 reports every line
    enabled: bool = True
    error_code: str = ""  # default: the name
    description: str = ""
    header: str = ""  # stateful: ``regex`` counts only within headerLines after this
    header_lines: int = 64
    repeat: bool = True  # a non-fatal rule's lines count toward kernelLogRepeatCount

    @property
    def code(self) -> str:
        return self.error_code or self.name


# The built-in rules. Message formats from torvalds/linux (function names are stable across
# releases, line numbers are not; the line numbers cited are of the versions read):
DEFAULT_KERNEL_RULES: Tuple[KernelRule, ...] = (
    # drivers/net/ethernet/mellanox/mlx5/core/cmd.c wait_func() and cb_timeout_handler():
    #   mlx5_core_warn(dev, "%s(0x%x) timeout. Will cause a leak of a command resource\n", ...)
    #   (v6.x cb_timeout_handler: "cmd[%d]: %s(0x%x) Async, timeout. Will cause a leak ...")
    # mlx5_core_warn prefixes "%s:%d:(pid %d): " (function, line, pid) to dev_warn:
    #   "mlx5_core 0000:03:00.0: wait_func:964:(pid 112): ENABLE_HCA(0x104) timeout. Will ..."
    KernelRule("cmd_exec_timeout",
               r"mlx5_core.*timeout\. Will cause a leak of a command resource",
               is_fatal=True, description="firmware command timeout with a leaked command "
               "resource: the driver can no longer manage the device"),
    # health.c poll_health() (v6.x: health.c:~800):
    #   mlx5_core_err(dev, "device's health compromised - reached miss count\n")
    KernelRule("health_poll_failed",
               r"mlx5_core.*device's health compromised.*reached miss count",
               is_fatal=True, description="firmware health counter stopped: the device "
               "does not respond"),
    # health.c print_health_info(): mlx5_log(dev, ..., "synd 0x%x: %s\n", synd,
    #   hsynd_str(synd)) where hsynd_str(MLX5_HEALTH_SYNDR_HW_UNRECOVERABLE_ERR) is
    #   "unrecoverable hardware error"
    KernelRule("unrecoverable_err", r"mlx5_core.*unrecoverable hardware error",
               is_fatal=True, description="the device reports an unrecoverable hardware "
               "error"),
    # net/sched/sch_generic.c dev_watchdog():
    #   before 6.8: WARN_ONCE(1, "NETDEV WATCHDOG: %s (%s): transmit queue %u timed out %u ms\n",
    #               dev->name, netdev_drivername(dev), i, timedout_ms)
    #   6.8+:       netdev_crit(dev, "NETDEV WATCHDOG: CPU: %d: transmit queue %u timed out "
    #               "%u ms\n", ...) -> "mlx5_core 0000:19:00.0 eth0: NETDEV WATCHDOG: CPU: 3: ..."
    KernelRule("netdev_watchdog",
               r"NETDEV WATCHDOG:.*\(mlx5_core\).*transmit queue.*timed out"
               r"|mlx5_core.*NETDEV WATCHDOG:.*transmit queue.*timed out",
               description="a transmit queue stalled (the driver recovers it)"),
    # en_main.c mlx5e_tx_timeout_work() / mlx5e_tx_timeout():
    #   netdev_err(priv->netdev, "TX timeout detected\n")
    KernelRule("mlx5_tx_timeout_detected", r"mlx5_core.*TX timeout detected",
               description="the driver detected a transmit timeout"),
    # en/reporter_rx.c mlx5e_reporter_rx_timeout():
    #   "RX timeout on channel: %d, %sRQ: 0x%x, CQ: 0x%x" reported through
    #   mlx5e_health_report() -> netdev_err(priv->netdev, "%s\n", err_str)
    KernelRule("mlx5_rx_timeout_detected", r"mlx5_core.*RX timeout on channel",
               description="a receive queue timed out"),
    # kernel/watchdog.c watchdog_timer_fn():
    #   pr_emerg("BUG: soft lockup - CPU#%d stuck for %us! [%s:%d]\n", ...) (pr_fmt "watchdog: ")
    # followed by the stack dump, one frame per line: " mlx5e_napi_poll+0x12d/0x6c0 [mlx5_core]"
    KernelRule("mlx5_napi_soft_lockup",
               r"\bmlx5e_(?:napi_poll|poll_ico_cq|poll_rx_cq|poll_tx_cq)\+0x",
               is_fatal=True, header=r"BUG: soft lockup - CPU#\d+ stuck for",
               description="a CPU locked up inside mlx5 NAPI polling"),
    # events.c mlx5_pcie_event() (torvalds/linux ac9c34d1 events.c#L295-L299):
    #   mlx5_core_warn_rl(dev, "Detected insufficient power on the PCIe slot (%uW).\n", ...)
    KernelRule("pci_power_insufficient",
               r"mlx5_core.*Detected insufficient power on the PCIe slot",
               description="the PCIe slot does not supply the power the card needs"),
    # events.c port_module_event() (ac9c34d1 events.c#L252-L254):
    #   mlx5_core_err(dev, "Port module event[error]: module %u, %s, %s\n", num, status, error)
    #   with mlx5_pme_error_to_string(MLX5_MODULE_EVENT_ERROR_HIGH_TEMPERATURE)
    #   "High Temperature"
    KernelRule("port_module_high_temp",
               r"mlx5_core.*Port module event.*High Temperature",
               description="the cable module is over temperature"),
    # cmd.c mlx5_cmd_out_err():
    #   mlx5_core_err_rl(dev, "%s(0x%x) op_mod(0x%x) failed, status %s(0x%x), syndrome "
    #   "(0x%x), err(%d)\n", ...) -> "mlx5_core 0000:19:00.0: mlx5_cmd_out_err:838:(pid 9):
    #   ACCESS_REG(0x805) op_mod(0x1) failed, status bad parameter(0x3), ..."
    KernelRule("access_reg_failed", r"mlx5_cmd_out_err.*ACCESS_REG.*failed",
               window=ONE_DAY, repeat=False, description="a register access failed "
               "(restricted functions log this for every counter read)"),
    # events.c port_module_event():
    #   mlx5_core_info(dev, "Port module event: module %u, %s\n", num, status) with
    #   mlx5_pme_status_to_string(MLX5_MODULE_STATUS_UNPLUGGED) "Cable unplugged"
    KernelRule("module_unplugged", r"mlx5_core.*Port module event.*Cable unplugged",
               description="the cable module was unplugged"),
)


def attribution(text: str) -> Tuple[Optional[str], Optional[str]]:
    """(PCI address, interface name) a kernel line names; either may be None."""
    pci = PCI_ADDRESS.search(text)
    iface = NETDEV_AFTER_PCI.search(text) or NETDEV_WATCHDOG_IFACE.search(text)
    return (pci.group(1).lower() if pci else None), (iface.group(1) if iface else None)


@dataclass(frozen=True)
class CompiledRule:
    rule: KernelRule
    pattern: re.Pattern[str]
    header: Optional[re.Pattern[str]]


def compile_rules(rules: Tuple[KernelRule, ...]) -> Tuple[CompiledRule, ...]:
    """The enabled rules, compiled (the config validated every regex)."""
    return tuple(CompiledRule(r, re.compile(r.regex), re.compile(r.header) if r.header else None)
                 for r in rules if r.enabled)


# ------------------------------------------------------------------ config

RULE_FIELDS = ("name", "regex", "enabled", "isFatal", "window", "errorCode", "description",
               "header", "headerLines", "repeat")


def _regex(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a regular expression, got {show(value)}")
    if "\0" in value:  # as every string of the file (nichealthd.toml(5)); a log line has none
        raise ValueError("must not contain a NUL byte")
    try:
        re.compile(value)
    except (re.error, RecursionError, OverflowError) as exc:
        reason = str(exc) if isinstance(exc, re.error) else "nested too deeply"
        raise ValueError(f"invalid regular expression: {reason}") from None
    return value


def _header(value: object) -> str:
    return "" if value == "" else _regex(value)


def _name(value: object) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError(f"expected a name of letters, digits, '_', '.', '-', got {show(value)}")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {show(value)}")
    if "\0" in value:
        raise ValueError("must not contain a NUL byte")
    return value


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {show(value)}")
    return value


def _window(value: object) -> float:
    seconds = parse_duration(value, allow_zero=True)
    low, high = WINDOW_BOUNDS
    if not low <= seconds <= high:
        raise ValueError(f"must be between {format_duration(low)} and "
                         f"{format_duration(high)}, got {show(value)}")
    return seconds


def _header_lines(value: object) -> int:
    low, high = HEADER_LINES_BOUNDS
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"expected a whole number between {low} and {high}, got {show(value)}")
    return value


_CONVERT: Dict[str, Tuple[str, Any]] = {
    "name": ("name", _name), "regex": ("regex", _regex), "enabled": ("enabled", _flag),
    "isFatal": ("is_fatal", _flag), "window": ("window", _window),
    "errorCode": ("error_code", _name), "description": ("description", _text),
    "header": ("header", _header), "headerLines": ("header_lines", _header_lines),
    "repeat": ("repeat", _flag),
}


def merge_kernel_rules(entries: object, source: Optional[str], lines: KeyLines,
                       errors: Collector) -> Tuple[KernelRule, ...]:
    """``[[kernelLogRules]]`` merged over the built-in rules by name (override, switch off,
    add). A new rule needs ``regex``; problems go to ``errors`` with file:line:key."""
    merged = {r.name: r for r in DEFAULT_KERNEL_RULES}
    order = [r.name for r in DEFAULT_KERNEL_RULES]
    if not isinstance(entries, list):
        errors.add(source, RULES_TABLE, f"expected an array of tables ([[{RULES_TABLE}]]), "
                   f"got {show(entries)}", lines.line("", RULES_TABLE))
        return DEFAULT_KERNEL_RULES
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        def line(key: str = "", index: int = index) -> Optional[int]:
            return lines.line(RULES_TABLE, key, index) or lines.line("", RULES_TABLE)
        where = f"{RULES_TABLE}[{index}]"
        if not isinstance(entry, dict):
            errors.add(source, where, f"expected a table, got {show(entry)}", line())
            continue
        name = errors.convert(source, f"{where}.name", _name, entry.get("name"), line("name"))
        if name is None:
            continue
        where = f"{RULES_TABLE}.{name}"
        if name in seen:
            errors.add(source, where, "configured twice; merge the two entries", line("name"))
            continue
        seen.add(name)
        values = _rule_values(entry, where, source, errors, line)
        if values is None:
            continue
        if name in merged:
            merged[name] = replace(merged[name], **values)
        elif "regex" not in values:
            errors.add(source, f"{where}.regex", "a new rule needs a regex (the built-in "
                       f"rules are {', '.join(r.name for r in DEFAULT_KERNEL_RULES)})",
                       line())
        else:
            merged[name] = KernelRule(name=name, **values)
            order.append(name)
    return tuple(merged[n] for n in order)


def _rule_values(entry: Dict[str, Any], where: str, source: Optional[str], errors: Collector,
                 line: Callable[[str], Optional[int]]) -> Optional[Dict[str, Any]]:
    """A rule entry's fields (less its name), converted; None when any key is unknown or any
    value wrong (each problem goes to ``errors``: the entry is then not merged)."""
    values: Dict[str, Any] = {}
    ok = True
    for key, raw in entry.items():
        if key == "name":
            continue
        if key not in _CONVERT:
            errors.add(source, f"{where}.{key}", f"unknown key; a rule has "
                       f"{', '.join(RULE_FIELDS)}", line(key))
            ok = False
            continue
        attr, convert = _CONVERT[key]
        value = errors.convert(source, f"{where}.{key}", convert, raw, line(key))
        if value is None:
            ok = False
        else:
            values[attr] = value
    return values if ok else None


def describe_rules(rules: Mapping[str, KernelRule]) -> List[str]:
    """One line per rule, for logs and documentation."""
    return [f"{r.name}: {'fatal' if r.is_fatal else 'non-fatal'}, window "
            f"{format_duration(r.window)}"
            f"{'' if r.is_fatal or r.repeat else ', not counted for repetition'}"
            for r in rules.values()]
