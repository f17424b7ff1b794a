# SPDX-License-Identifier: Apache-2.0
"""The modes of shardfs-bench, one module each; the default (no mode option)
is striping.py. Each module says in its docstring what it measures, against
which baseline, and what it does not do."""
