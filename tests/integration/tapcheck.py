# SPDX-License-Identifier: Apache-2.0
"""TAP lines from the Python checks of the integration tests (stage_check.py,
cache_check.py): the shell test relays them (lib.sh sfs_relay_tap)."""
import sys

prefix = ""  # put before every description, e.g. the phase
failed = 0
_n = 0


def ok(cond, what, detail=""):
    """One TAP line; on failure, detail's lines as diagnostics."""
    global _n, failed
    _n += 1
    failed += not cond
    print(("ok" if cond else "not ok"), _n, "-", prefix + what, flush=True)
    if not cond and detail:
        for line in str(detail).splitlines():
            print("#", line, flush=True)


def raises(fn, e):
    """Whether fn() raises OSError with errno e."""
    try:
        fn()
        return False
    except OSError as x:
        return x.errno == e


def done():
    sys.exit(1 if failed else 0)
