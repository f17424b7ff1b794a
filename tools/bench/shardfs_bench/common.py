# SPDX-License-Identifier: Apache-2.0
"""The bench's ground: its name, where it and the tools it runs live, the parsed
options, progress on stderr, running a command, units.

Owns ARGS, one argparse.Namespace that cli.main fills in place
(parse_args(namespace=ARGS)), so that every module's `from .common import ARGS`
sees the options and the paths cli adds (ARGS.mnt); and tool(), the lookup of a
tool beside the bench (installed: PKGLIBEXECDIR) or in its folder of the source
tree. Does not parse options (cli.py) or touch the cluster or a mount.
Threading: ARGS is filled by cli.main before any thread starts, then only read;
log() and run() may be called from any thread.
"""

import argparse
import os
import re
import subprocess
import sys


PROG = "shardfs-bench"

# The folder of the entry point (tools/bench/shardfs-bench in a source tree,
# PKGLIBEXECDIR/shardfs-bench installed), which holds this package.
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# In a source tree the bench lives in tools/bench/ and the root is two
# folders up; installed, the tools it runs are beside it (PKGLIBEXECDIR).
ROOT = os.path.dirname(os.path.dirname(HERE))

# The entry point: what the --hints child runs (with --hint-child first).
ENTRY = os.path.join(HERE, PROG)


def tool(name, tree_dir):
    """The path of a tool the bench runs: beside it (installed), or in its
    folder of the source tree (tools/TREE_DIR/NAME)."""
    beside = os.path.join(HERE, name)
    if os.path.exists(beside):
        return beside
    return os.path.join(ROOT, "tools", tree_dir, name)


CLUSTER = tool("shardfs-cluster", "testbed")
KB = 1000
MiB = 1 << 20
GiB = 1 << 30
CLK_TCK = os.sysconf("SC_CLK_TCK")

# The options, filled in place by cli.main (see the module's docstring).
ARGS = argparse.Namespace()


class BenchError(Exception):
    """A run that cannot go on: cli prints what it has and this, and exits 1."""


def log(msg):
    """Progress on stderr, unless -q."""
    if not ARGS.quiet_progress:
        print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def run(cmd, check=True, capture=True, timeout=None):
    """Run cmd (its output captured as text unless capture is false).
    Returns the CompletedProcess; with check, raises BenchError (with the
    last line of its stderr) when it exits non-zero."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.PIPE if capture else None,
                       text=True, timeout=timeout)
    if check and p.returncode != 0:
        err = (p.stderr or "").strip().splitlines()
        raise BenchError(f"{' '.join(cmd)}: exit {p.returncode}"
                         + (f": {err[-1]}" if err else ""))
    return p


def rate_mb_s(rate):
    """A tc rate (200mbit, 25mbps) in MB/s, or None."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]?)(bit|bps)", rate.lower())
    if not m:
        return None
    v = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
    return v / (8 if m.group(3) == "bit" else 1) / 1e6
