# SPDX-License-Identifier: Apache-2.0
"""The modes of shardfs-bench, one module each, and their registry (MODES).

A mode module has a header docstring (what it measures, against which
baseline, what it does not do) and declares:

  MODE                 a mode.Mode: the option that selects it, its group (the
                       modes that may run with it), its header, whether it
                       uses --cache-base, the programs it runs
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

from . import (cache, fleet, fleet_warm, hints, memory, mlperf, passthrough, policy,
               random_records, sf_rss, slow_node, small_files, stall, striping)

DEFAULT = striping

# The order of --help and, within a group, of the runs and their tables.
MODES = [cache, policy, memory, small_files, random_records, passthrough, sf_rss, hints, stall,
         slow_node, fleet, fleet_warm, mlperf]

REQUIRED = ("MODE", "add_arguments", "bench")
for _m in [DEFAULT] + MODES:
    assert all(hasattr(_m, a) for a in REQUIRED), f"{_m.__name__} lacks one of {REQUIRED}"


def dest(mode):
    """The ARGS attribute of mode's option (--slow-node: slow_node)."""
    return mode.MODE.option.lstrip("-").replace("-", "_")


def hook(mode, name):
    """mode's optional function name, or None."""
    return getattr(mode, name, None)
