#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The reference cannot drift from the code (issue 43).

Each mount option and each metric is described in one place:
  - every option the daemon's own table knows (`shardfs --help`, generated
    from fs/options.c) has exactly one entry in shardfs(8), and shardfs(8)
    has no entry for an option the table lacks;
  - every metric fs/observe/stats.c renders (the names it passes to help(), metric()
    and the PER_* macros) has exactly one entry in shardfs-stats(7), and
    that page has no entry for a metric the code lacks;
  - wherever else the documents name an option or a metric (the README, the
    other man pages, packaging/doc, the systemd notes), it exists;
  - the README's option table gives each option the default the table has;
  - the README stays a front page: at most MAX_README_LINES lines, no table
    cell longer than MAX_README_LINE characters, every relative link inside
    the repository and pointing at a file that exists.

usage: check_docs.py SHARDFS_BINARY SOURCE_ROOT
TAP output; exit 1 when a check fails.
"""
import os
import re
import subprocess
import sys

MAX_README_LINES = 450
MAX_README_LINE = 400

results = []


def check(ok, what, detail=""):
    results.append((bool(ok), what, detail))


def help_options(binary):
    """{name: help paragraph} from `shardfs --help`'s mount option lines."""
    out = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    if not out.strip():
        out = subprocess.run([binary, "--help"], capture_output=True, text=True).stderr
    opts, cur = {}, None
    section = False
    for line in out.splitlines():
        if line.startswith("Mount options"):
            section = True
            continue
        if section and line and not line.startswith(" "):
            break
        if not section:
            continue
        m = re.match(r"^  ([a-z_]+)([= ]|$)", line)
        if m:
            cur = m.group(1)
            opts[cur] = line
        elif cur:
            opts[cur] += " " + line.strip()
    return opts


def roff_plain(s):
    s = re.sub(r"^\.(?:B|I|BI|BR|IR|RB|RI|IB) ", "", s)
    s = re.sub(r"\\f[BIRP]", "", s)
    return s.replace("\\-", "-").replace("\\(em", "-").replace("\\~", " ").replace("\\", "")


def man_headings(path, section=None):
    """The headings (the line after each .TP or .TQ, in plain text) of a man page,
    or of its .SH `section` only (up to the next .SH)."""
    lines = open(path, encoding="utf-8").read().splitlines()
    inside, heads = section is None, []
    for i, line in enumerate(lines):
        if section is not None and line.startswith(".SH "):
            inside = line[4:].strip() == section
        if inside and line in (".TP", ".TQ") and i + 1 < len(lines):
            heads.append(roff_plain(lines[i + 1]))
    return heads


def stats_metrics(src):
    text = open(os.path.join(src, "fs/observe/stats.c"), encoding="utf-8").read()
    pat = r'\b(?:help|metric|PER_[A-Z_]+)\(\s*(?:f\s*,\s*)?"(shardfs_[a-z0-9_]+)"'
    return set(re.findall(pat, text))


def doc_files(src):
    files = [os.path.join(src, "README.md"), os.path.join(src, "packaging/systemd/README.md"),
             os.path.join(src, "packaging/README.md")]
    for d in ("packaging/man", "packaging/doc"):
        for f in sorted(os.listdir(os.path.join(src, d))):
            files.append(os.path.join(src, d, f))
    return [f for f in files if os.path.isfile(f)]


def check_options(binary, src):
    opts = help_options(binary)
    check(len(opts) > 20, f"shardfs --help lists the mount options ({len(opts)})")
    heads = man_headings(os.path.join(src, "packaging/man/shardfs.8"), "MOUNT OPTIONS")
    named = [m.group(1) for m in (re.match(r"^([a-z_]+)", h) for h in heads) if m]
    for o in sorted(opts):
        n = named.count(o)
        check(n == 1, f"shardfs(8) has one entry for option '{o}'", f"{n} entries")
    extra = sorted(set(named) - set(opts))
    check(not extra, "shardfs(8) describes no option the code lacks", " ".join(extra))
    return opts


def check_metrics(src):
    metrics = stats_metrics(src)
    check(len(metrics) > 80, f"fs/observe/stats.c renders the metrics ({len(metrics)})")
    named = []
    for h in man_headings(os.path.join(src, "packaging/man/shardfs-stats.7")):
        named += re.findall(r"shardfs_[a-z0-9_]+", h)
    for m in sorted(metrics):
        n = named.count(m)
        check(n == 1, f"shardfs-stats(7) has one entry for metric '{m}'", f"{n} entries")
    extra = sorted(set(named) - metrics)
    check(not extra, "shardfs-stats(7) describes no metric the code lacks", " ".join(extra))
    return metrics


HIST_SUFFIXES = ("_bucket", "_sum", "_count")
NOT_METRICS = {"shardfs_ioctl", "shardfs_ioctl.h"}


def c_api_names(src):
    """libshardfs's functions and types (shardfs_*), which are not metrics."""
    text = open(os.path.join(src, "tools/client/libshardfs/shardfs.h"), encoding="utf-8").read()
    return set(re.findall(r"\b(shardfs_[a-z0-9_]+)\b", text))


def check_mentions(src, opts, metrics):
    api = c_api_names(src)
    generic = {"ro", "rw", "defaults", "noauto", "_netdev", "nofail", "noatime", "comment"}
    for path in doc_files(src):
        rel = os.path.relpath(path, src)
        text = open(path, encoding="utf-8").read()
        plain = roff_plain(text) if re.search(r"\.[0-9]$", path) else text
        bad = set()
        for tok in re.findall(r"shardfs_[a-z0-9_]*[a-z0-9]\*?", plain):
            base = tok
            if base in NOT_METRICS or base.startswith("shardfs_ioctl") or base in api:
                continue
            if base.endswith("*"):
                if not any(m.startswith(base[:-1]) for m in metrics):
                    bad.add(tok)
                continue
            for suf in HIST_SUFFIXES:
                if base.endswith(suf) and base[: -len(suf)] in metrics:
                    base = base[: -len(suf)]
            if base not in metrics:
                bad.add(tok)
        check(not bad, f"{rel}: every metric it names exists", " ".join(sorted(bad)))
        if not rel.endswith(".md") or rel == "tools/bench/benchmarks.md":
            continue  # the benchmark history may name options of its day
        badopt = set()
        for name in re.findall(r"`([a-z][a-z_]*)=(?!True`|False`)[^`]*`", text):
            if name not in opts and name not in generic:
                badopt.add(name)
        check(not badopt, f"{rel}: every `option=` it names exists", " ".join(sorted(badopt)))


def check_readme_table(src, opts):
    """Rows of the README's option table: | `opt=...` [/ `opt`] | default | ... |"""
    rows = 0
    for line in open(os.path.join(src, "README.md"), encoding="utf-8"):
        row = line.strip().replace("\\|", "\x00")
        cells = [c.strip().replace("\x00", "|") for c in row.strip("|").split("|")] \
            if line.startswith("| `") else []
        if len(cells) < 3:
            continue
        names = [n for n in re.findall(r"`([a-z_]+)[=`]", cells[0])]
        if not names or not all(n in opts for n in names):
            continue
        rows += 1
        default = cells[1].strip("`").strip()
        helps = [opts[n] for n in names]
        if all(re.match(r"^  [a-z_]+(\s|$)", opts[n]) for n in names):
            flagged = [n for n in names if "(default)" in opts[n]]
            want = flagged[0] if flagged else "off"
            check(default.split(" ")[0].strip("`") == want,
                  f"README option table: default of {'/'.join(names)} is the code's",
                  f"README {default!r}, code {want!r}")
        else:
            h = helps[0]
            ok = (f"default {default})" in h or f"default: {default})" in h
                  or f"default {default}," in h)
            check(ok, f"README option table: default of {names[0]} is the code's",
                  f"README {default!r}; --help: {h.split('(')[-1]}")
    check(rows >= 5, f"README has an option table ({rows} rows checked)")


def check_front_page(src):
    path = os.path.join(src, "README.md")
    lines = open(path, encoding="utf-8").read().splitlines()
    check(len(lines) <= MAX_README_LINES, f"README is a front page: {len(lines)} lines "
          f"(at most {MAX_README_LINES})")
    long = [i + 1 for i, l in enumerate(lines) if len(l) > MAX_README_LINE]
    check(not long, f"README has no line over {MAX_README_LINE} characters",
          "lines " + ", ".join(map(str, long)))
    for path in doc_files(src):
        if not path.endswith(".md"):
            continue
        rel = os.path.relpath(path, src)
        text = open(path, encoding="utf-8").read()
        bad = []
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"^[a-z]+:", target):
                continue
            full = os.path.abspath(os.path.join(os.path.dirname(path), target))
            if not full.startswith(os.path.abspath(src) + os.sep) or not os.path.exists(full):
                bad.append(target)
        check(not bad, f"{rel}: its relative links exist inside the repository",
              " ".join(bad))


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    binary, src = sys.argv[1], sys.argv[2]
    opts = check_options(binary, src)
    metrics = check_metrics(src)
    check_mentions(src, opts, metrics)
    check_readme_table(src, opts)
    check_front_page(src)
    print(f"1..{len(results)}")
    failed = 0
    for i, (ok, what, detail) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {what}")
        if not ok:
            failed += 1
            if detail:
                print(f"# {detail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
