"""Kernel sysfs formats the simulator reproduces (drivers/infiniband/core/sysfs.c).

Kept in one place so the fake tree and its mutations spell every value exactly as the kernel
does; the daemon's parser must survive the real spelling, not a convenient one.
"""

from __future__ import annotations

from typing import Dict, Tuple

# ports/<n>/state: "%d: %s\n" (ib_port_state).
PORT_STATES: Tuple[str, ...] = ("NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER")

# ports/<n>/phys_state: "%u: %s\n"; index 0 is not a real state.
PHYS_STATES: Tuple[str, ...] = (
    "<unknown>",
    "Sleep",
    "Polling",
    "Disabled",
    "PortConfigurationTraining",
    "LinkUp",
    "LinkErrorRecovery",
    "Phy Test",
)

# /sys/class/net/<iface>/operstate values (RFC 2863 as printed by the kernel).
OPERSTATES: Tuple[str, ...] = (
    "unknown",
    "notpresent",
    "down",
    "lowerlayerdown",
    "testing",
    "dormant",
    "up",
)

# counters/ of a ConnectX-7 port with the IB PMA width of each (PortCounters / extended).
# PMA error counters saturate at all-ones instead of wrapping.
PMA_COUNTER_WIDTHS: Dict[str, int] = {
    "VL15_dropped": 16,
    "excessive_buffer_overrun_errors": 4,
    "link_downed": 8,
    "link_error_recovery": 8,
    "local_link_integrity_errors": 4,
    "multicast_rcv_packets": 64,
    "multicast_xmit_packets": 64,
    "port_rcv_constraint_errors": 8,
    "port_rcv_data": 64,
    "port_rcv_errors": 16,
    "port_rcv_packets": 64,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_constraint_errors": 8,
    "port_xmit_data": 64,
    "port_xmit_discards": 16,
    "port_xmit_packets": 64,
    "port_xmit_wait": 32,
    "symbol_error": 16,
    "unicast_rcv_packets": 64,
    "unicast_xmit_packets": 64,
}

# hw_counters/ (mlx5 firmware counters, 32 bit, wrap at 2^32).
HW_COUNTERS: Tuple[str, ...] = (
    "duplicate_request",
    "implied_nak_seq_err",
    "lifespan",
    "local_ack_timeout_err",
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "req_cqe_error",
    "req_cqe_flush_error",
    "req_remote_access_errors",
    "req_remote_invalid_request",
    "resp_cqe_error",
    "resp_cqe_flush_error",
    "resp_local_length_error",
    "resp_remote_access_errors",
    "rnr_nak_retry_err",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
    "rx_atomic_requests",
    "rx_dct_connect",
    "rx_icrc_encapsulated",
    "rx_read_requests",
    "rx_write_requests",
)
# Added by kernels from mid-2024 on; older kernels lack them (profile option).
NEW_HW_COUNTERS: Tuple[str, ...] = ("req_transport_retries_exceeded", "req_rnr_retries_exceeded")
HW_COUNTER_WIDTH = 32
# ... but these are read as 64-bit values (drivers/infiniband/hw/mlx5/counters.c: the PPCNT
# extended counter and the congestion counters), not 32-bit Q counters.
HW_COUNTERS_64: Tuple[str, ...] = ("rx_icrc_encapsulated", "rp_cnp_ignored", "rp_cnp_handled",
                                   "np_ecn_marked_roce_packets", "np_cnp_sent")

# /sys/class/net/<iface>/statistics/ files the simulator creates.
NETDEV_STATISTICS: Tuple[str, ...] = (
    "rx_bytes",
    "tx_bytes",
    "rx_packets",
    "tx_packets",
    "rx_errors",
    "tx_errors",
    "rx_dropped",
    "tx_dropped",
    "rx_crc_errors",
    "rx_missed_errors",
)


def _lookup(table: Tuple[str, ...], value: str, what: str, first: int) -> int:
    """Accept a name (any case, spaces/underscores optional) or its number."""
    text = value.strip()
    if text.isdigit():
        num = int(text)
        if first <= num < len(table):
            return num
    squashed = text.replace(" ", "").replace("_", "").lower()
    for num in range(first, len(table)):
        if table[num].replace(" ", "").replace("_", "").lower() == squashed:
            return num
    names = ", ".join(table[first:])
    raise ValueError(f"bad {what} {value!r} (one of: {names})")


def port_state_line(value: str) -> str:
    """Kernel text of ports/<n>/state for a state name, e.g. 'DOWN' -> '1: DOWN\\n'."""
    num = _lookup(PORT_STATES, value, "port state", 0)
    return f"{num}: {PORT_STATES[num]}\n"


def phys_state_line(value: str) -> str:
    """Kernel text of ports/<n>/phys_state, e.g. 'Polling' -> '2: Polling\\n'."""
    num = _lookup(PHYS_STATES, value, "physical state", 1)
    return f"{num}: {PHYS_STATES[num]}\n"


def operstate_line(value: str) -> str:
    """Kernel text of operstate; rejects values the kernel never prints."""
    text = value.strip().lower()
    if text not in OPERSTATES:
        raise ValueError(f"bad operstate {value!r} (one of: {', '.join(OPERSTATES)})")
    return text + "\n"


def state_name(line: str) -> str:
    """'4: ACTIVE\\n' -> 'ACTIVE' (for display; tolerant of odd content)."""
    _, _, name = line.strip().partition(": ")
    return name or line.strip()
