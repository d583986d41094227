#!/usr/bin/env python3
"""Writes the emulation copy of a module's tensor-core kernels (emulator.h says what the emulation
models). The module is the one whose mutants file is named (lab/<module>/emulate/mutants.py:
attention_prefill, attention_decode, store); its variants are the files that reach kernels/ptx_*.cuh, as the
registry names them.

  OUT/kernels/ptx_sm80.cuh, ptx_sm90.cuh
                        kernels/ptx_*.cuh with each function holding inline PTX removed and
                        sm80.h / sm90.h (the emulated wrappers, same names and signatures) included in
                        its place. OUT comes first on the include path, so every include of
                        kernels/ptx_*.cuh in the emulated build finds these: the emulator shadows kernels/ptx_*.cuh.
  OUT/tc_headers.h      the module's helper headers (kernels/<module>/*.cuh that reach kernels/ptx_*.cuh), in
                        include order; the helpers that reach an emulated instruction take their
                        caller's source site. PTX anywhere but kernels/ptx_*.cuh stops the generator.
  OUT/variants_K.cpp    the variants, SHARDS files compiled in parallel: every kernels/<module>/v*.cu that
                        includes one of those headers, unchanged but for its launch (<<<>>> and
                        cudaLaunchKernelEx become the emulator's), its shared memory (the dynamic
                        array; a static __shared__ scalar, one 8-byte slot per CTA; a static
                        __shared__ array of a plain type, one per CTA placed in the CTA's shared bytes
                        past the dynamic ones, so its addresses are shared addresses, mbarriers too;
                        any other static __shared__ declaration stops the generator) and the
                        registry (KL_VARIANT registers with the emulator), each in a namespace of its
                        own; then the planted bugs of the module's mutants file, as variants named
                        mutant_<what>.

The text keeps its line numbers (removed code leaves blank lines; #line directives name the original
files), so the std::source_location defaults of the emulated wrappers (EMU_HERE) name the kernels' own
files and lines.

Usage: gen.py SOURCE_DIR OUT_DIR MUTANTS        writes the files (only those whose text changed)
       gen.py --list SOURCE_DIR MUTANTS         prints "variant NAME" and "mutant NAME" lines, for CMake
MUTANTS is the module's list of planted bugs (lab/attention_prefill/emulate/mutants.py)."""
import glob
import importlib.util
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

MODULE = "attention_prefill"  # set from the mutants file's path (set_module)
KERNELS = "kernels/" + MODULE
# kernels/ptx_*.cuh and the files of emulated wrappers that shadow their PTX, in include order
PTX = {"kernels/ptx_sm80.cuh": "sm80.h", "kernels/ptx_sm90.cuh": "sm90.h"}
INCLUDE = re.compile(r'^#include "(kernels/[\w/]+\.cuh)"[ \t]*$', re.M)
SHARDS = 6  # extra.cmake compiles variants_0.cpp .. variants_5.cpp
# the element types of the static __shared__ arrays the emulation places in a CTA's shared bytes
STATIC_TYPES = ("unsigned char|bool|int|unsigned|float|double|"
                "int8_t|uint8_t|int16_t|uint16_t|int32_t|uint32_t|int64_t|uint64_t")
# variants a module's mutants file asks for beside those that include kernels/ptx_*.cuh or a helper (a fused
# store variant reaches pdl_wait through kernels/common.cuh alone), by name or by a header they include (so a
# learner's copy of one is emulated too): load_mutants fills it
ALSO_EMULATED = set()
# the CUDA built-ins of emulator.h that take their caller's site
SITED_BUILTINS = {"__syncthreads", "__syncwarp", "__shfl_xor_sync"}
# wgmma wrappers: the text of these arguments is passed along as the operands' names
NAMED_OPERANDS = {"wgmma_ss": 1, "wgmma_rs": 2}


def die(msg):
    sys.exit(f"gen.py: {msg} (lab/emulate/gen.py)")


def read(path):
    with open(path) as f:
        return f.read()


def match_close(text, i, open_ch, close_ch):
    """Index of the bracket closing the one at text[i]."""
    depth = 0
    for k in range(i, len(text)):
        if text[k] == open_ch:
            depth += 1
        elif text[k] == close_ch:
            depth -= 1
            if depth == 0:
                return k
    die(f"unbalanced '{open_ch}' at offset {i}")


def blank(text):
    """The same number of lines, empty: line numbers after it stay those of the source."""
    return "\n" * text.count("\n")


class Function:
    def __init__(self, text, start, name, params, body):
        self.start, self.name = start, name
        self.params = params  # (index of '(', index of ')')
        self.body = body      # (index of '{', index of '}')
        self.text = text[start:body[1] + 1]
        self.body_text = text[body[0]:body[1] + 1]


FUNC_HEAD = re.compile(r"^(?:template <[^\n]*>[ \n])?__device__ __forceinline__ [^;{(]*?\b(\w+)\s*\(", re.M)


def functions(text):
    """The namespace-scope device functions of a header (struct members are indented: not these)."""
    out = []
    for m in FUNC_HEAD.finditer(text):
        p_open = m.end() - 1
        p_close = match_close(text, p_open, "(", ")")
        b_open = text.index("{", p_close)
        if ";" in text[p_close:b_open]:
            continue  # a declaration
        out.append(Function(text, m.start(), m.group(1), (p_open, p_close), (b_open, match_close(text, b_open, "{", "}"))))
    return out


def asm_macros(text):
    """Names and spans of the #define blocks that (transitively) hold inline PTX."""
    blocks = []
    for m in re.finditer(r"^#define (\w+)(?:[^\n]*\\\n)*[^\n]*\n", text, re.M):
        blocks.append((m.group(1), m.start(), m.end(), m.group(0)))
    names = {n for n, _, _, body in blocks if "asm" in body}
    grew = True
    while grew:  # the macros the PTX ones expand (register lists) go with them
        grew = False
        for n, _, _, body in blocks:
            if n in names:
                for other, _, _, _ in blocks:
                    if other not in names and re.search(r"\b%s\b" % other, body):
                        names.add(other)
                        grew = True
    return names, [(s, e) for n, s, e, _ in blocks if n in names]


def splice(text, edits):
    """Applies (start, end, replacement) edits, which must not overlap."""
    for s, e, r in sorted(edits, reverse=True):
        text = text[:s] + r + text[e:]
    return text


def helper_headers(src):
    """The module's helper headers that reach kernels/ptx_*.cuh (directly or through another helper), in an
    order where each comes after the helpers it includes: (path, text, included paths)."""
    found = {}
    for path in sorted(glob.glob(os.path.join(src, KERNELS, "*.cuh"))):
        text = read(path)
        found[f"{KERNELS}/{os.path.basename(path)}"] = (text, INCLUDE.findall(text))
    reaches = set(PTX)
    grew = True
    while grew:
        grew = False
        for name, (_, incs) in found.items():
            if name not in reaches and any(i in reaches for i in incs):
                reaches.add(name)
                grew = True
    order, seen = [], set()
    def visit(name):
        if name in seen or name not in found or name not in reaches:
            return
        seen.add(name)
        for i in found[name][1]:
            visit(i)
        order.append(name)
    for name in found:
        visit(name)
    return order


def emulated_header(src, name, sited, helpers):
    """The header `name` (a path from SOURCE_DIR) for the emulation. `sited` (in/out): the names of the
    functions taking a caller's site, to which this header's instrumented helpers are added. Includes of
    `helpers` go (tc_headers.h holds them all, in order); those of kernels/ptx_*.cuh stay and find the shadows."""
    text = read(os.path.join(src, name))
    text = INCLUDE.sub(lambda m: "" if m.group(1) in helpers else m.group(0), text)
    text = re.sub(r"^#pragma once[ \t]*$", "", text, flags=re.M)
    macro_names, macro_spans = asm_macros(text)
    text = splice(text, [(s, e, blank(text[s:e])) for s, e in macro_spans])
    funcs = functions(text)
    removed = [f for f in funcs
               if "asm(" in f.body_text or "asm volatile" in f.body_text
               or any(re.search(r"\b%s\b" % m, f.body_text) for m in macro_names)]
    if removed:
        ptx_file = PTX.get(name)
        if not ptx_file:
            die(f"{name} has inline PTX in {', '.join(f.name for f in removed)}: PTX lives in kernels/ptx_*.cuh "
                "(one wrapper per instruction, shadowed by lab/emulate/)")
        ptx = read(os.path.join(HERE, ptx_file))
        for f in removed:
            if not re.search(r"__forceinline__[^;{(]*\b%s\s*\(" % f.name, ptx):
                die(f"{name}: {f.name}() holds inline PTX that {ptx_file} does not emulate: add it there")
        sited |= {f.name for f in removed}
    # helpers that reach a sited function take their caller's site and open a scope with it
    kept = [f for f in funcs if f not in removed]
    instrumented = set()
    grew = True
    while grew:
        grew = False
        for f in kept:
            if f.name in instrumented or "..." in text[f.params[0]:f.params[1]]:
                continue  # a parameter pack cannot be followed by a defaulted parameter
            if any(re.search(r"\b%s\s*[<(]" % re.escape(s), f.body_text) for s in sited | instrumented):
                instrumented.add(f.name)
                grew = True
    edits = []
    for f in kept:
        if f.name not in instrumented:
            continue
        has_params = text[f.params[0] + 1:f.params[1]].strip() not in ("", "void")
        edits.append((f.params[1], f.params[1], (", " if has_params else "") + "::emu::site emu_at = EMU_HERE"))
        edits.append((f.body[0] + 1, f.body[0] + 1, " ::emu::site_scope emu_scope_(emu_at);"))
    for i, f in enumerate(removed):
        replacement = blank(f.text)
        if i == 0:  # the emulated wrappers, where the first real one was (same line count)
            replacement = f'#include "{PTX[name]}"' + replacement
        edits.append((f.start, f.start + len(f.text), replacement))
    sited |= instrumented
    text = splice(text, edits)
    if re.search(r"\basm\s*(volatile\s*)?\(", text):
        die(f"{name} has inline PTX outside a function gen.py can replace")
    return f'#line 1 "{name}"\n' + text


def name_operands(text):
    """wgmma_ss<...>(d, ...) and wgmma_rs<...>(d, a, ...) calls get their operands' text appended."""
    edits = []
    for m in re.finditer(r"\b(wgmma_ss|wgmma_rs)\s*<", text):
        close_t = match_close(text, m.end() - 1, "<", ">")
        if text[close_t + 1] != "(":
            continue
        open_p = close_t + 1
        close_p = match_close(text, open_p, "(", ")")
        args, depth, last = [], 0, open_p + 1
        for k in range(open_p + 1, close_p):
            c = text[k]
            depth += c in "([{<"
            depth -= c in ")]}>"
            if c == "," and depth == 0:
                args.append(text[last:k].strip())
                last = k + 1
        args.append(text[last:close_p].strip())
        names = ", ".join('"%s"' % a.replace('"', "'") for a in args[:NAMED_OPERANDS[m.group(1)]])
        edits.append((close_p, close_p, ", " + names))
    return splice(text, edits)


LAUNCH = re.compile(r"(\b[\w:]+(?:\s*<[^<>;()]*(?:<[^<>;()]*>[^<>;()]*)*>)?)\s*<<<(.*?)>>>\s*\(", re.S)


def emulated_launches(text):
    """Kernel<<<grid, block, smem, stream>>>(args) -> ::emu::launch(Kernel, grid, block, smem, stream)(args);
    cudaLaunchKernelEx and kernels/common.cuh's kl::launch_pdl -> the emulator's."""
    text = LAUNCH.sub(lambda m: "::emu::launch(%s, %s)(" % (m.group(1), m.group(2)), text)
    text = re.sub(r"\bkl::launch_pdl\s*\(", "::emu::launch_pdl(", text)
    return re.sub(r"\bcudaLaunchKernelEx\s*\(", "::emu::launch_kernel_ex(", text)


def tensor_core_variants(src, helpers):
    """(name, path) of the variant files that include a helper header or kernels/ptx_*.cuh, or that the mutants
    file names in ALSO_EMULATED (the file's name, or a header it includes), in number order."""
    def number(path):
        m = re.match(r"v(\d+)_", os.path.basename(path))
        return int(m.group(1)) if m else 1 << 30
    out = []
    for path in sorted(glob.glob(os.path.join(src, KERNELS, "v*_*.cu")), key=number):
        if any(i in helpers or i in PTX or i in ALSO_EMULATED for i in INCLUDE.findall(read(path))) or \
                os.path.basename(path)[:-3] in ALSO_EMULATED:
            out.append((os.path.basename(path)[:-3], path))
    return out


def apply_mutant(m, text, path):
    """The mutant's edits on a variant's text; each find text must occur exactly once. A #line after
    an edit that changes the line count keeps the lines after it numbered as in the file."""
    edits = []
    for find, replace in m["edits"]:
        count = text.count(find)
        if count != 1:
            die(f"mutant {m['name']}: its find text occurs {count} times in {os.path.basename(path)}, not once: "
                f"update the mutants file\n  find: {find!r}")
        s = text.index(find)
        e = s + len(find)
        line_end = text.find("\n", e)
        if replace.count("\n") != find.count("\n") and line_end >= 0:
            next_line = text.count("\n", 0, line_end) + 2
            edits.append((s, line_end + 1, replace + text[e:line_end + 1] +
                          f'#line {next_line} "{KERNELS}/{os.path.basename(path)}"\n'))
        else:
            edits.append((s, e, replace))
    return splice(text, edits)


def resolve_lines(expect, text, name):
    """An expected message's `@line{TEXT}` becomes the number of the (only) line of the mutated file
    holding TEXT, so a comment added above a kernel's code moves the expectation with it."""
    def line_of(m):
        hits = [i + 1 for i, line in enumerate(text.split("\n")) if m.group(1) in line]
        if len(hits) != 1:
            die(f"mutant {name}: @line{{{m.group(1)}}} is on {len(hits)} lines of its file, not one")
        return str(hits[0])
    return re.sub(r"@line\{([^}]*)\}", line_of, expect)


def c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def variant_unit(name, path, text, helpers, mutant=None):
    """A variant file as a namespace of the emulation; returns (hoisted includes, text)."""
    includes = []
    lines = text.split("\n")
    for i, line in enumerate(lines):
        inc = INCLUDE.match(line)
        if (inc and inc.group(1) in helpers) or line.strip() == '#include "kernels/variant.h"':
            lines[i] = ""
        elif line.startswith("#include"):
            includes.append(line)
            lines[i] = ""
    body = "\n".join(lines)
    body, n = re.subn(r"extern __shared__ (?:__align__\(\d+\) )?(unsigned char|uint4) (\w+)\[\];",
                      r"\1 *\2 = reinterpret_cast<\1 *>(::emu::dynamic_smem());", body)
    slots = iter(range(1 << 30))  # each static __shared__ scalar an 8-byte slot of its own in the CTA
    arrays = iter(range(1 << 30))  # each static __shared__ array a place of its own in the CTA's shared bytes

    def scalar(m):
        return f"{m.group(1)} &{m.group(2)} = *reinterpret_cast<{m.group(1)} *>(::emu::cta_scalar({next(slots)}));"

    def static_arrays(m):
        align, t, out = m.group(1), m.group(2), []
        for decl in m.group(3).split(","):
            name, dims = re.fullmatch(r"\s*(\w+)((?:\[[^\]]+\])+)\s*", decl).groups()
            out.append(f"{t} (&{name}){dims} = *reinterpret_cast<{t} (*){dims}>(::emu::cta_static("
                       f"{next(arrays)}, sizeof({t}{dims}), {align or f'alignof({t})'}));")
        return " ".join(out)
    body = re.sub(r"__shared__ (bool|int|unsigned|float) (\w+);", scalar, body)
    body = re.sub(rf"__shared__ (?:__align__\((\d+)\) )?({STATIC_TYPES}) "
                  r"(\w+(?:\[[^\]]+\])+(?:, *\w+(?:\[[^\]]+\])+)*);", static_arrays, body)
    # Any other static __shared__ declaration would compile as a per-thread variable: stop instead.
    left = re.search(r"^[ \t]*(?:static[ \t]+)?__shared__\b.*$", body, re.M)
    if left:
        die(f"{os.path.basename(path)}: a __shared__ declaration the emulation does not translate "
            f"(a scalar of bool, int, unsigned or float, or arrays of {STATIC_TYPES.replace('|', ', ')}): "
            f"{left.group(0).strip()}")
    body = name_operands(emulated_launches(body))
    emu_name = mutant["name"] if mutant else name
    defs = {
        "EMU_NAME": c_string(emu_name) if mutant else "nullptr",
        "EMU_TRACED": "true" if "traced_cta(" in text else "false",
        "EMU_OVERLAPPED": "true" if "wgmma_wait<1>" in text else "false",
        "EMU_MUTANT_OF": c_string(name) if mutant else "nullptr",
        "EMU_EXPECT": c_string(resolve_lines(mutant["expect"], text, emu_name)) if mutant else "nullptr",
        "EMU_SCHEDULE": "%dull" % int(mutant.get("schedule", 0)) if mutant else "0ull",
    }
    out = [f"#define {k} {v}" for k, v in defs.items()]
    out.append(f"namespace emu_{emu_name} {{")
    out.append(f'#line 1 "{KERNELS}/{os.path.basename(path)}"')
    out.append(body)
    out.append("}")
    out += [f"#undef {k}" for k in defs]
    # A shard compiles several units in one file: a macro a unit defines (a variant's bug switch, set
    # to 1 by its mutant) must not reach the units after it.
    out += [f"#undef {k}" for k in dict.fromkeys(re.findall(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", body, re.M))]
    return includes, "\n".join(out)


def set_module(mutants_path):
    """The module is the one whose folder holds the mutants file: lab/<module>/emulate/mutants.py."""
    global MODULE, KERNELS
    MODULE = os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(mutants_path))))
    KERNELS = "kernels/" + MODULE


def load_mutants(path):
    """The MUTANTS list of a module's mutants file."""
    set_module(path)
    spec = importlib.util.spec_from_file_location("mutants", path)
    if not spec:
        die(f"no mutants file {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ALSO_EMULATED.update(getattr(mod, "ALSO_EMULATED", []))
    return mod.MUTANTS


def units(src, mutants, helpers):
    """Every variant, then every mutant: (name, kind, includes, text)."""
    found = tensor_core_variants(src, helpers)
    out = []
    texts = {}
    for name, path in found:
        texts[name] = (path, read(path))
        inc, body = variant_unit(name, path, texts[name][1], helpers)
        out.append((name, "variant", inc, body))
    for m in mutants:
        if m["variant"] not in texts:
            die(f"mutant {m['name']}: no tensor-core variant {m['variant']} in {KERNELS}")
        path, text = texts[m["variant"]]
        inc, body = variant_unit(m["variant"], path, apply_mutant(m, text, path), helpers, m)
        out.append((m["name"], "mutant", inc, body))
    return out


def write_if_changed(path, text):
    if os.path.exists(path) and read(path) == text:
        return
    with open(path, "w") as f:
        f.write(text)


GENERATED = "// Generated by lab/emulate/gen.py: do not edit."


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--list":
        src = sys.argv[2]
        for name, kind, _, _ in units(src, load_mutants(sys.argv[3]), helper_headers(src)):
            print(kind, name)
        return
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, out, mutants = sys.argv[1], sys.argv[2], load_mutants(sys.argv[3])
    helpers = helper_headers(src)
    sited = set(SITED_BUILTINS)
    # kernels/ptx_*.cuh first: the helpers' instrumentation follows the wrappers the shadows take a site in
    os.makedirs(os.path.join(out, "kernels"), exist_ok=True)
    for name in PTX:
        text = emulated_header(src, name, sited, helpers)
        write_if_changed(os.path.join(out, name), "\n".join([GENERATED, "#pragma once", '#include "emulator.h"', text]) + "\n")
    headers = [emulated_header(src, h, sited, helpers) for h in helpers]
    header = "\n".join([GENERATED, "#pragma once", '#include "emulator.h"']
                       + [name_operands(emulated_launches(h)) for h in headers]) + "\n"
    write_if_changed(os.path.join(out, "tc_headers.h"), header)
    shards = [[] for _ in range(SHARDS)]
    # mutants first, then the variants in number order: a learner's new (highest-numbered) variant
    # lands in one shard and leaves the others' text, and their objects, as they were
    every = units(src, mutants, helpers)
    for i, unit in enumerate([u for u in every if u[1] == "mutant"] + [u for u in every if u[1] == "variant"]):
        shards[i % SHARDS].append(unit)
    for k, shard in enumerate(shards):
        includes = sorted({inc for _, _, incs, _ in shard for inc in incs})
        text = "\n".join([GENERATED, '#include "tc_headers.h"'] + includes + [body for _, _, _, body in shard]) + "\n"
        write_if_changed(os.path.join(out, f"variants_{k}.cpp"), text)


if __name__ == "__main__":
    main()
