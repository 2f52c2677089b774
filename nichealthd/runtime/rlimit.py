"""Raising the soft open-file limit at start: the reader keeps ~15 sysfs files open per device.

systemd's default soft ``RLIMIT_NOFILE`` is 1024, too few for hosts with many VFs. The unit
sets ``LimitNOFILE=``; outside systemd (or under an older unit) the daemon raises its own soft
limit toward the hard one. Under the shipped unit ``SystemCallFilter=~@resources`` makes
setrlimit fail with EPERM: that is expected, logged once at debug level, and harmless because
``LimitNOFILE=`` already applied. Whatever limit results is shared out by the open-file plan
(:mod:`nichealthd.runtime.fdplan`): a reserve, the surfaces' connections, kept sysfs files.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("nichealthd.rlimit")

# No need to go further: 65536 keeps every file of a 4096-device host open.
NOFILE_TARGET = 65536


def raise_nofile_limit(target: int = NOFILE_TARGET) -> int:
    """Raise the soft NOFILE limit to min(hard, target); return the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = target if hard == resource.RLIM_INFINITY else min(hard, target)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (OSError, ValueError) as exc:
            log.debug("cannot raise the open-file limit from %d to %d (%s); keeping %d",
                      soft, want, exc, soft)
            return soft
        log.debug("open-file limit raised from %d to %d", soft, want)
        return want
    return soft
