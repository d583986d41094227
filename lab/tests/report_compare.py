#!/usr/bin/env python3
"""Compares two folders of guides as the tests must: byte for byte, except for what describes a
variant that no results row measured.

`kernlab report` marks every such line with `<!-- not measured: MODULE VARIANT -->` (or puts it
between `<!-- not measured: MODULE VARIANT { -->` and `<!-- } not measured -->`): a learner's new
variant adds those lines to the guides and changes no other, so a guide regenerated before the
variant existed still matches once they are left out. Runs of blank lines are squeezed to one,
since a left-out block leaves its blank lines behind.

With --results DIR, every marker must name a variant that no row of DIR measured: a generator
that marked a measured row would otherwise hide it from the comparison.

    report_compare.py EXPECTED ACTUAL [--results DIR] [--exclude NAME]...
Exit 0 when they match; 1 with a unified diff of the first differing files otherwise.
"""
import argparse
import difflib
import glob
import json
import os
import re
import sys

INLINE = re.compile(r"<!-- not measured: (\S+) (\S+) -->")
BEGIN = re.compile(r"^<!-- not measured: (\S+) (\S+) \{ -->$")
END = "<!-- } not measured -->"


def strip(text):
    """The text without its not-measured lines and blocks, blank runs squeezed; and the
    (module, variant) pairs the markers named."""
    kept, named, inside = [], set(), False
    for line in text.split("\n"):
        begin = BEGIN.match(line)
        if begin:
            named.add(begin.groups())
            inside = True
            continue
        if inside:
            inside = line != END
            continue
        inline = INLINE.search(line)
        if inline:
            named.add(inline.groups())
            continue
        if line == "" and kept and kept[-1] == "":
            continue
        kept.append(line)
    if inside:
        raise ValueError("a not-measured block is never closed")
    return "\n".join(kept), named


def measured(results):
    """(module, variant) of every results row under results (flat and per-device files)."""
    pairs = set()
    for path in glob.glob(os.path.join(results, "*.jsonl")) + glob.glob(os.path.join(results, "*", "*.jsonl")):
        with open(path) as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    pairs.add((row.get("module"), row.get("variant")))
    return pairs


def files(root, exclude):
    out = []
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "data" and not d.startswith(".")]
        for n in names:
            rel = os.path.relpath(os.path.join(dirpath, n), root)
            if n not in exclude and not n.startswith("."):
                out.append(rel)
    return sorted(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("expected")
    ap.add_argument("actual")
    ap.add_argument("--results")
    ap.add_argument("--exclude", action="append", default=[])
    a = ap.parse_args()
    have = measured(a.results) if a.results else None
    want_files, got_files = files(a.expected, a.exclude), files(a.actual, a.exclude)
    bad = 0
    for rel in sorted(set(want_files) ^ set(got_files)):
        print(f"only in {a.expected if rel in want_files else a.actual}: {rel}")
        bad += 1
    for rel in sorted(set(want_files) & set(got_files)):
        with open(os.path.join(a.expected, rel), encoding="utf-8", errors="surrogateescape") as f:
            want, named_want = strip(f.read())
        with open(os.path.join(a.actual, rel), encoding="utf-8", errors="surrogateescape") as f:
            got, named_got = strip(f.read())
        if have is not None:
            for module, variant in sorted(named_got):
                if module != "*" and (module, variant) in have:
                    print(f"{a.actual}/{rel}: marks {module} {variant} as not measured, but the results measured it")
                    bad += 1
        if want != got:
            bad += 1
            if bad <= 3:
                sys.stdout.writelines(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                                           os.path.join(a.expected, rel), os.path.join(a.actual, rel),
                                                           n=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
