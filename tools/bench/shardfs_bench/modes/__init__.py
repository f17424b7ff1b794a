# SPDX-License-Identifier: Apache-2.0
"""The modes of shardfs-bench, one module each, and their registry (MODES).

A mode module has a header docstring (what it measures, against which
baseline, what it does not do) and declares:

  OPTION      the option that selects it ("--cache"; None for DEFAULT, the
              mode run when no option selects one); its dest names the ARGS
              attribute, and a value other than None or False selects it
  GROUP       None, or a name shared by modes that may run in one invocation
              (they run in MODES' order, under one header); two selected
              modes that share no GROUP do not mix
  HEADER      "passes" (page caches dropped, MB/s the median of --reps) or
              "rows" (one run per row): the first output line
  RAW_LINE    whether the raw reader's and the mount's options follow it
  CACHE_BASE  whether it uses --cache-base (then locked for the run)
  TOOLS       the ARGS attributes of the programs it runs ("shardfs",
              "rawread", "smallread"), checked before the cluster starts
  add_arguments(ap)    its own options (options that several modes read are
                       cli.py's)
  bench(cluster, out)  its runs on the started cluster (ARGS.mnt is its
                       mountpoint); it appends its lines to out

and, where it needs them:

  check(args)       a message when its options are wrong, else None; called
                    for every mode, selected or not, before anything starts
  configure(args)   defaults that follow from its selection (--nodes)
  clients(args)     how many fleet client namespaces it needs
  prepare(export)   data written before the cluster starts

Adding a mode (say --mlperf WORKLOAD): write modes/mlperf.py as above and add
`mlperf` to MODES below; that is all. Its passes come from the shared modules:
cluster.py (the cluster, link caps), mount.py (Mount, stats, settle),
passes.py (measure, mount_pass, raw_pass, item_pass), accounting.py (CPU and
memory from /proc), report.py (rows, ratios, CPU per GiB or per item),
data.py (data sets written once), disk.py and floor.py (limits and floors).

Threading: the registry is built at import and then only read.
"""

from . import (cache, fleet, fleet_warm, hints, memory, passthrough, policy, random_records,
               sf_rss, slow_node, small_files, stall, striping)

DEFAULT = striping

# The order of --help and, within a GROUP, of the runs and their tables.
MODES = [cache, policy, memory, small_files, random_records, passthrough, sf_rss, hints, stall,
         slow_node, fleet, fleet_warm]

REQUIRED = ("OPTION", "GROUP", "HEADER", "RAW_LINE", "CACHE_BASE", "TOOLS", "add_arguments",
            "bench")
for _m in [DEFAULT] + MODES:
    assert all(hasattr(_m, a) for a in REQUIRED), f"{_m.__name__} lacks one of {REQUIRED}"


def dest(mode):
    """The ARGS attribute of mode's OPTION (--slow-node: slow_node)."""
    return mode.OPTION.lstrip("-").replace("-", "_")


def hook(mode, name):
    """mode's optional function name, or None."""
    return getattr(mode, name, None)
