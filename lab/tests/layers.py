#!/usr/bin/env python3
"""The house rules, read off the tree (README.md, "Layout"):

1. Floors. Every source file sits on a floor, and a file includes only headers of its own floor
   or below:
     1  kernels/ and reference/          variants, module ABI headers, PTX layers, CPU references
     2  lab/core/, perf/, lab/emulate/   the runtime, the measurement library, the emulator
     3  lab/<module>/, lab/story/, lab/tests/   modules, the decoder, whole-lab tests
     4  lab/report/                      the guide generator
     5  lab/kernlab.c                    the command
   Tests (test_*, mutants*) sit beside what they test and may include every floor below the
   command: a test of the story's guide, say, drives the decoder and the report room together.
2. No source file is over MAX_LINES lines.
3. Inline PTX (asm) only in kernels/ptx_*.cuh, one wrapper per instruction (the emulator, which
   shadows those headers, is the one other place that names instructions).
4. Every folder of kernels/ is a module's (lab/<name>/ exists).

  layers.py [ROOT]            checks the tree at ROOT (default: this file's repository)
  layers.py --self-test       plants an upward include and a long file in a scratch tree; both
                              must be reported
Exit 0 when the tree keeps the rules, 1 with one line per breach otherwise.
"""
import os
import re
import shutil
import sys
import tempfile

MAX_LINES = 900
SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".cpp", ".py", ".sh", ".cmake")
INCLUDING_EXT = (".c", ".h", ".cu", ".cuh", ".cpp")
SKIP_DIRS = {".git", ".gpu-deps", ".whl", "__pycache__", "dev", "story-out"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
INLINE_PTX = re.compile(r'\basm\s*(volatile\s*)?\(')
FLOOR_NAMES = {1: "kernels/reference", 2: "core/perf/emulate", 3: "modules", 4: "report", 5: "command"}


def floor_of(rel):
    """The floor of a repository-relative path, or None for files outside the floors."""
    parts = rel.split("/")
    if parts[0] in ("kernels", "reference"):
        return 1
    if parts[0] == "perf":
        return 2
    if parts[0] != "lab" or len(parts) < 2:
        return None
    if len(parts) == 2:
        return 5 if parts[1].startswith("kernlab.") else None
    return {"core": 2, "emulate": 2, "report": 4}.get(parts[1], 3)


def sources(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith("build")]
        for f in files:
            if f.endswith(SOURCE_EXT) or f == "CMakeLists.txt":
                yield os.path.relpath(os.path.join(d, f), root)


def resolve(root, rel, name):
    """The repository-relative path an include names, the way the build finds it (the including
    file's folder, the repository root, lab/core/), or None (a system or generated header)."""
    for base in (os.path.dirname(rel), "", "lab/core"):
        cand = os.path.normpath(os.path.join(base, name))
        if not cand.startswith("..") and os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def breaches(root):
    out = []
    # kernels/<name>/ is the module <name>'s: a folder there that no module owns reads as a module
    # without its tests, guide and results
    kdir = os.path.join(root, "kernels")
    for d in sorted(os.listdir(kdir)) if os.path.isdir(kdir) else []:
        if os.path.isdir(os.path.join(kdir, d)) and not os.path.isdir(os.path.join(root, "lab", d)):
            out.append(f"kernels/{d}/: a folder of kernels/ with no module lab/{d}/ (shared headers sit in kernels/ itself)")
    for rel in sorted(sources(root)):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        lines = text.count("\n")
        if lines > MAX_LINES:
            out.append(f"{rel}: {lines} lines (at most {MAX_LINES})")
        if (rel.endswith(INCLUDING_EXT) and not rel.startswith(("kernels/ptx_", "lab/emulate/"))
                and INLINE_PTX.search(text)):
            line = text.count("\n", 0, INLINE_PTX.search(text).start()) + 1
            out.append(f"{rel}:{line}: inline PTX outside kernels/ptx_*.cuh")
        mine = floor_of(rel)
        name = os.path.basename(rel)
        if mine is not None and (name.startswith("test_") or name.startswith("mutants")):
            mine = max(mine, 4)
        if mine is None or not rel.endswith(INCLUDING_EXT):
            continue
        for m in INCLUDE.finditer(text):
            target = resolve(root, rel, m.group(1))
            theirs = floor_of(target) if target else None
            if theirs is not None and theirs > mine:
                line = text.count("\n", 0, m.start()) + 1
                out.append(f"{rel}:{line}: includes {target}, a floor up "
                           f"({FLOOR_NAMES[mine]} -> {FLOOR_NAMES[theirs]})")
    return out


def self_test(root):
    """Plants each breach in a scratch copy of the floors and expects it reported."""
    tmp = tempfile.mkdtemp()
    try:
        for d in ("kernels", "reference", "lab", "perf"):
            shutil.copytree(os.path.join(root, d), os.path.join(tmp, d),
                            ignore=shutil.ignore_patterns("__pycache__"))
        base = breaches(tmp)
        if base:
            print("self-test: the tree breaks the rules already:\n  " + "\n  ".join(base))
            return 1
        planted = {
            "kernels/rmsnorm/v0_naive.cu": ('#include "lab/core/registry.h"\n', "a floor up"),
            "lab/rmsnorm/module.c": ('#include "lab/report/report.h"\n', "a floor up"),
            "lab/core/tensor.c": ('#include "rmsnorm/rmsnorm_module.h"\n', None),
            "perf/bench.c": ("/* x */\n" * (MAX_LINES + 1), "lines (at most"),
            "kernels/rope/v0_naive.cu": ('static __device__ void f() { asm volatile("trap;"); }\n', "inline PTX"),
        }
        failed = 0
        os.makedirs(os.path.join(tmp, "kernels", "ptx"))
        got = [b for b in breaches(tmp) if b.startswith("kernels/ptx/")]
        print(f"self-test: kernels/ptx/: {'caught' if got else 'MISSED'}" + (f" ({got[0]})" if got else ""))
        failed += not got
        os.rmdir(os.path.join(tmp, "kernels", "ptx"))
        for rel, (text, expect) in planted.items():
            path = os.path.join(tmp, rel)
            saved = open(path).read()
            with open(path, "w") as fh:
                fh.write(text + saved)
            got = [b for b in breaches(tmp) if b.startswith(rel)]
            with open(path, "w") as fh:
                fh.write(saved)
            if expect is None:
                # A name that does not resolve from lab/core is a system header: not a breach.
                ok = not got
            else:
                ok = any(expect in b for b in got)
            print(f"self-test: {rel}: {'caught' if expect and ok else 'ignored' if ok else 'MISSED'}"
                  + (f" ({got[0]})" if got else ""))
            failed += not ok
        return 1 if failed else 0
    finally:
        shutil.rmtree(tmp)


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", ".."))
    if argv[1:] == ["--self-test"]:
        return self_test(root)
    if len(argv) > 1:
        root = argv[1]
    found = breaches(root)
    for b in found:
        print(b)
    print(f"{len(found)} breach(es) of the floors, the {MAX_LINES}-line limit or the PTX rule" if found
          else f"the floors hold; no source file over {MAX_LINES} lines; no inline PTX outside kernels/ptx_*.cuh")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
