#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fs_graph — the graph of fs/: who includes whom, and who calls a function
that another file alone defines; fails on a loop or on 8 or more levels.

Usage: fs_graph.py SOURCE_ROOT BUILD_ROOT

A node is a module of fs/: a .c and the .h of the same name are one node
("ops/ioctl"), fs.h is "fs". An arrow A -> B means that a file of A
includes a header of B ('#include "..."' resolved against the including
file's folder), or that A's object file leaves undefined a symbol that the
object of exactly one other fs/ source defines (nm, on the objects that
compile_commands.json names for the daemon's build; a source compiled only
into a bench or a test counts too). Files outside fs/ are not nodes.

Prints every arrow with its reason, each loop (a strongly connected set of
more than one node), and the longest chain (levels = nodes on it; a loop
counts as one node of the chain). Exits 1 on a loop or on MAX_LEVELS levels
or more, 0 otherwise; TAP output for meson.

Owns: nothing but its output. Single-threaded; reads the build, changes
nothing.
"""
import json
import os
import re
import subprocess
import sys

MAX_LEVELS = 8
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


FILES = False  # --files: a node per file, .c and .h apart


def module_of(fs_root, path):
    rel = os.path.relpath(path, fs_root)
    if rel.startswith('..'):
        return None
    return rel if FILES else os.path.splitext(rel)[0]


def fs_files(fs_root):
    for dirpath, _, names in os.walk(fs_root):
        for n in sorted(names):
            if n.endswith(('.c', '.h')):
                yield os.path.join(dirpath, n)


def include_edges(fs_root):
    edges = {}
    for path in fs_files(fs_root):
        src = module_of(fs_root, path)
        with open(path, encoding='utf-8') as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            target = os.path.normpath(os.path.join(os.path.dirname(path), inc))
            dst = module_of(fs_root, target)
            if dst and dst != src and os.path.exists(target):
                edges.setdefault((src, dst), set()).add('includes ' + os.path.basename(target))
    return edges


def objects(fs_root, build_root):
    """One object file per fs/ source: the daemon's where it has one."""
    with open(os.path.join(build_root, 'compile_commands.json'), encoding='utf-8') as f:
        entries = json.load(f)
    chosen = {}
    for e in entries:
        path = os.path.normpath(os.path.join(e['directory'], e['file']))
        mod = module_of(fs_root, path)
        if not mod:
            continue
        obj = os.path.join(e['directory'], e['output'])
        daemon = e['output'].startswith('fs' + os.sep)
        if path not in chosen or (daemon and not chosen[path][1]):
            chosen[path] = (obj, daemon)
    return {path: obj for path, (obj, _) in chosen.items()}


def nm(obj, *flags):
    out = subprocess.run(['nm', *flags, obj], check=True, capture_output=True, text=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        if parts:
            syms.add(parts[-1])
    return syms


def call_edges(fs_root, build_root):
    objs = objects(fs_root, build_root)
    defined, undefined = {}, {}
    for path, obj in objs.items():
        if not os.path.exists(obj):
            sys.exit(f'Bail out! {obj} is not built: build the daemon first')
        defined[path] = nm(obj, '--defined-only', '--extern-only')
        undefined[path] = nm(obj, '--undefined-only')
    definers = {}
    for path, syms in defined.items():
        for s in syms:
            definers.setdefault(s, set()).add(path)
    edges = {}
    for path, syms in undefined.items():
        src = module_of(fs_root, path)
        for s in sorted(syms):
            by = definers.get(s, set()) - {path}
            if len(by) != 1:
                continue
            dst = module_of(fs_root, next(iter(by)))
            if dst != src:
                edges.setdefault((src, dst), set()).add('calls ' + s)
    return edges


def sccs(nodes, succ):
    """Tarjan's strongly connected components, iteratively."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(succ.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                out.append(comp)
    return out


def longest_chain(nodes, succ):
    comps = sccs(nodes, succ)
    comp_of = {n: k for k, c in enumerate(comps) for n in c}
    csucc = {k: set() for k in range(len(comps))}
    for v in nodes:
        for w in succ.get(v, ()):
            if comp_of[v] != comp_of[w]:
                csucc[comp_of[v]].add(comp_of[w])
    best = {}
    # Tarjan emits a component after every one it reaches: successors first.
    for k in range(len(comps)):
        nxt = max(csucc[k], key=lambda j: best[j][0], default=None)
        best[k] = (1 + (best[nxt][0] if nxt is not None else 0), nxt)
    start = max(range(len(comps)), key=lambda k: best[k][0], default=None)
    chain, k = [], start
    while k is not None:
        chain.append('{' + ', '.join(sorted(comps[k])) + '}' if len(comps[k]) > 1
                     else next(iter(comps[k])))
        k = best[k][1]
    return comps, chain


def main():
    global FILES
    if len(sys.argv) == 4 and sys.argv[1] == '--files':
        FILES = True
        del sys.argv[1]
    if len(sys.argv) != 3:
        sys.exit('usage: fs_graph.py [--files] SOURCE_ROOT BUILD_ROOT')
    fs_root = os.path.join(os.path.abspath(sys.argv[1]), 'fs')
    build_root = os.path.abspath(sys.argv[2])
    edges = include_edges(fs_root)
    for k, why in call_edges(fs_root, build_root).items():
        edges.setdefault(k, set()).update(why)
    nodes = {module_of(fs_root, p) for p in fs_files(fs_root)}
    succ = {}
    for (a, b) in edges:
        succ.setdefault(a, set()).add(b)
    comps, chain = longest_chain(nodes, succ)
    loops = [c for c in comps if len(c) > 1]

    print('1..2')
    for (a, b) in sorted(edges):
        why = sorted(edges[(a, b)])
        more = f' (+{len(why) - 3} more)' if len(why) > 3 else ''
        print(f'# {a} -> {b}: {", ".join(why[:3])}{more}')
    print(f'# {len(nodes)} nodes, {len(edges)} arrows')
    for c in loops:
        cyc = sorted(c)
        print(f'# LOOP of {len(c)}: ' + ', '.join(cyc))
        for (a, b) in sorted(edges):
            if a in c and b in c:
                print(f'#   {a} -> {b}: {", ".join(sorted(edges[(a, b)])[:2])}')
    print(f'# levels: {len(chain)}: ' + ' -> '.join(chain))
    print(('ok' if not loops else 'not ok') + f' 1 - no loop ({len(loops)} found)')
    print(('ok' if len(chain) < MAX_LEVELS else 'not ok') +
          f' 2 - fewer than {MAX_LEVELS} levels ({len(chain)})')
    return 0 if not loops and len(chain) < MAX_LEVELS else 1


if __name__ == '__main__':
    sys.exit(main())
