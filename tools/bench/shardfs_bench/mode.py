# SPDX-License-Identifier: Apache-2.0
"""What a mode declares for cli (Mode), and the declaration the item modes
share (item_mode); modes/__init__.py describes a mode module as a whole.

Owns nothing that runs. Threading: values only.
"""

from typing import NamedTuple, Optional, Tuple


class Mode(NamedTuple):
    """What cli needs to know of a mode before it runs it."""

    # the option that selects it ("--cache"; None for the default mode): its
    # dest names the ARGS attribute, and a value other than None or False
    # selects the mode
    option: Optional[str]
    # None, or a name shared by modes that may run in one invocation (in
    # MODES' order, under one header); selected modes that share no group
    # do not mix
    group: Optional[str] = None
    # "passes" (page caches dropped, MB/s the median of --reps) or "rows"
    # (one run per row): the first output line
    header: str = "passes"
    # whether the raw reader's and the mount's options follow that line
    raw_line: bool = False
    # whether it uses --cache-base (then locked for the run)
    cache_base: bool = False
    # the ARGS attributes of the programs it runs, checked before the
    # cluster starts
    tools: Tuple[str, ...] = ("shardfs", "rawread")


def item_mode(option):
    """A mode that reads items (files or records) with shardfs-smallread,
    beside a cache_dir, and runs with the other item modes."""
    return Mode(option, group="items", header="rows", cache_base=True,
                tools=("shardfs", "smallread"))
