"""A Slurm command's output is bounded: what it prints beyond a reason's size is read and
dropped, never held, so a broken or hostile command cannot grow the daemon (measured as the
peak resident set of a fresh process, reset before the command runs)."""

from __future__ import annotations

import json
import subprocess
import sys

from nichealthd.surfaces.slurm import command

from ..harness import REPO

MIB = 1024 * 1024
FLOOD = 400 * 1000 * 1000  # bytes

PROBE = f"""
import json, shutil
from nichealthd.surfaces.slurm import command

def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

def grown(argv, timeout):
    try:  # reset the peak to the current size (Linux 4.0 and later)
        open("/proc/self/clear_refs", "w").write("5")
    except OSError:
        pass
    before = max(rss(), 0)
    outcome = command.run(argv, timeout)
    return peak() - before, len(outcome.output), outcome.error

sh = shutil.which("sh")
flood = grown((sh, "-c", "head -c {FLOOD} /dev/zero | tr '\\\\0' x; echo; echo oops >&2"), 120)
endless = grown((shutil.which("yes"), "nichealthd: a reason"), 1.0)
print(json.dumps({{"flood": flood, "endless": endless}}))
"""


def test_400_mb_of_output_grows_the_process_by_less_than_5_mib() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True,
                          text=True, timeout=300, check=True)
    result = json.loads(done.stdout)
    (flood_growth, flood_kept, flood_error) = result["flood"]
    (endless_growth, endless_kept, endless_error) = result["endless"]
    print(f"400 MB of output: peak RSS +{flood_growth / MIB:.2f} MiB, {flood_kept} bytes kept; "
          f"endless output for 1 s: +{endless_growth / MIB:.2f} MiB")
    assert flood_error == "" and flood_kept == command.OUTPUT_MAX
    assert flood_growth < 5 * MIB
    assert endless_error.endswith("did not finish within 1 s") and endless_growth < 5 * MIB


def test_a_reason_after_a_flood_on_stderr_is_still_read() -> None:
    """Both pipes are drained at once: a command that fills stderr before it prints the
    reason on stdout neither stalls nor loses the reason."""
    outcome = command.run(("sh", "-c", "head -c 10000000 /dev/zero >&2; echo 'a reason'"),
                          60.0)
    assert outcome.ok and outcome.output == "a reason\n"
