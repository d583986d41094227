#!/usr/bin/env python3
"""gen.py's promises, on a scratch copy of kernels/attention_prefill/ and kernels/ptx_*.cuh:
- a new vN_*.cu that includes a tensor-core header is an emulated variant with no other edit, and a
  variant without one (v0_naive, v1_tiled) is not;
- a mutant whose find text no longer matches stops the generator, naming the mutant;
- a function with inline PTX in kernels/ptx_*.cuh that the emulation files do not define stops the generator,
  naming it; inline PTX in a module's helper header (outside kernels/ptx_*.cuh) stops it too;
- the generated text keeps every source line at its number;
- a mutant's expected message follows its line (`@line{TEXT}`) when code moves, and TEXT must be on one line;
- a static __shared__ array of a plain type (several in one declaration too) becomes one place in the CTA's
  shared bytes, and any other static __shared__ declaration stops the generator (compiled as is it would
  be one variable per thread);
- a macro a unit defines ends with the unit (a shard compiles several units in one file);
- a variant that includes a header a mutants file names in ALSO_EMULATED is emulated (store's fused family,
  and a learner's copy of one of them), and one that does not is not.
Usage: test_gen.py SOURCE_DIR MUTANTS"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "gen.py")


def run(*args):
    return subprocess.run([sys.executable, GEN, *args, MUTANTS], capture_output=True, text=True)


def scratch(src):
    """A copy of the module's kernels folder and of the PTX layer (kernels/ptx_*.cuh)."""
    tmp = tempfile.mkdtemp()
    shutil.copytree(os.path.join(src, "kernels", "attention_prefill"), os.path.join(tmp, "kernels", "attention_prefill"))
    for name in ("ptx_sm80.cuh", "ptx_sm90.cuh"):
        shutil.copy(os.path.join(src, "kernels", name), os.path.join(tmp, "kernels", name))
    return tmp


def check(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}")
    print(f"ok: {what}")


def main():
    global MUTANTS
    src, MUTANTS = sys.argv[1], sys.argv[2]
    tmp = scratch(src)
    try:
        kernels = os.path.join(tmp, "kernels", "attention_prefill")
        listed = run("--list", tmp)
        check(listed.returncode == 0, "gen.py --list runs")
        names = listed.stdout.split()
        check("v10_pingpong" in names and "v0_naive" not in names and "v1_tiled" not in names,
              "the variants are the files that include a tensor-core header")
        shutil.copy(os.path.join(kernels, "v10_pingpong.cu"), os.path.join(kernels, "v11_learner.cu"))
        check("v11_learner" in run("--list", tmp).stdout.split(), "a new v11_learner.cu is picked up with no other edit")

        out = os.path.join(tmp, "out")
        check(run(tmp, out).returncode == 0, "gen.py writes the emulation copy")
        tc = open(os.path.join(out, "tc_headers.h")).read().split("\n")
        for name in ("kernels/ptx_sm80.cuh", "kernels/ptx_sm90.cuh", "kernels/attention_prefill/softmax.cuh",
                     "kernels/attention_prefill/mainloop_sm80.cuh", "kernels/attention_prefill/mainloop_sm90.cuh",
                     "kernels/attention_prefill/kv_ring.cuh"):
            original = open(os.path.join(tmp, name)).read().split("\n")
            generated = open(os.path.join(out, name)).read().split("\n") if "/ptx_" in name else tc
            start = generated.index(f'#line 1 "{name}"') + 1
            # a line is either kept, emptied (removed PTX), or kept with the emulation's additions
            moved = [i + 1 for i, line in enumerate(original)
                     if generated[start + i].strip() and generated[start + i] != line and "emu" not in generated[start + i]
                     and '#include "sm' not in generated[start + i] and "<<<" not in line and "wgmma_" not in line]
            check(not moved, f"{name} keeps its line numbers")

        v10 = os.path.join(kernels, "v10_pingpong.cu")
        text = open(v10).read()
        open(v10, "w").write(text.replace("wait_v(j - 1);", "wait_v(j - 1); /* moved */"))
        r = run(tmp, out)
        check(r.returncode != 0 and "mutant_no_wait_v" in r.stderr,
              "a mutant whose find text stopped matching stops the generator, naming it")
        open(v10, "w").write("/* a comment added above the code */\n" + text)
        check(run(tmp, out).returncode == 0, "a line added above the code keeps every mutant's expected line valid")
        open(v10, "w").write("/* auto pv = [&] */\n" + text)
        r = run(tmp, out)
        check(r.returncode != 0 and "@line{auto pv = [&]}" in r.stderr,
              "an expected line that names text on two lines stops the generator")
        open(v10, "w").write(text)

        kernel_open = "    extern __shared__"
        check(kernel_open in text, "v10_pingpong.cu declares its dynamic shared memory where the test expects")
        arrays = "    __shared__ __align__(8) uint64_t full[4], empty[4];\n    __shared__ float part[32];\n"
        open(v10, "w").write(text.replace(kernel_open, arrays + kernel_open, 1))
        r = run(tmp, out)
        units = "".join(open(os.path.join(out, f)).read() for f in os.listdir(out) if f.startswith("variants_"))
        check(r.returncode == 0 and "uint64_t (&full)[4] = *reinterpret_cast<uint64_t (*)[4]>(::emu::cta_static(0, "
              "sizeof(uint64_t[4]), 8));" in units and "uint64_t (&empty)[4] = *reinterpret_cast<uint64_t (*)[4]>("
              "::emu::cta_static(1, " in units and "float (&part)[32] = *reinterpret_cast<float (*)[32]>("
              "::emu::cta_static(2, sizeof(float[32]), alignof(float)));" in units,
              "static __shared__ arrays become places of their own in the CTA's shared bytes, with their alignment")
        for other in ("__shared__ float2 pair;", "__shared__ float2 pairs[4];"):
            open(v10, "w").write(text.replace(kernel_open, f"    {other}\n" + kernel_open, 1))
            r = run(tmp, out)
            check(r.returncode != 0 and other in r.stderr,
                  f"{other} stops the generator, naming it (compiled as is it would be one variable per thread)")
        open(v10, "w").write(text)

        # A shard compiles several units in one file; a unit's own macro (a bug switch its mutant sets to
        # 1) must end with the unit, or a later unit of the shard compiles with it.
        open(v10, "w").write("#define KL_TEST_SWITCH 1\n" + text)
        check(run(tmp, out).returncode == 0, "gen.py writes the emulation copy with a macro defined in a variant")
        units = "".join(open(os.path.join(out, f)).read() for f in os.listdir(out) if f.startswith("variants_"))
        defined = [i for i in range(len(units)) if units.startswith("#define KL_TEST_SWITCH", i)]
        check(defined and all(units.find("#undef KL_TEST_SWITCH", i) > i for i in defined)
              and units.count("#undef KL_TEST_SWITCH") >= len(defined),
              "a macro a unit defines is undefined after the unit, before the next unit of its shard")
        open(v10, "w").write(text)

        sm90 = os.path.join(tmp, "kernels", "ptx_sm90.cuh")
        h = open(sm90).read()
        open(sm90, "w").write(h.replace("/* ---- ordering ---- */", "/* ---- ordering ---- */\n"
                                        "__device__ __forceinline__ void new_ptx() { asm volatile(\"trap;\"); }"))
        r = run(tmp, out)
        check(r.returncode != 0 and "new_ptx" in r.stderr, "inline PTX the emulation lacks stops the generator, naming it")
        open(sm90, "w").write(h)

        softmax = os.path.join(kernels, "softmax.cuh")
        s = open(softmax).read()
        open(softmax, "w").write(s.replace("/* The running state of a warp's rows", "__device__ __forceinline__ void "
                                           "helper_ptx() { asm volatile(\"trap;\"); }\n/* The running state of a warp's rows"))
        r = run(tmp, out)
        check(r.returncode != 0 and "helper_ptx" in r.stderr and "kernels/ptx_" in r.stderr,
              "inline PTX in a helper header (outside kernels/ptx_*.cuh) stops the generator, naming it")
        open(softmax, "w").write(s)
    finally:
        shutil.rmtree(tmp)
    check_also_emulated(src)


def check_also_emulated(src):
    """store's mutants file names its fused family by the header the family includes."""
    tmp = tempfile.mkdtemp()
    try:
        shutil.copytree(os.path.join(src, "kernels", "store"), os.path.join(tmp, "kernels", "store"))
        for name in ("ptx_sm80.cuh", "ptx_sm90.cuh"):
            shutil.copy(os.path.join(src, "kernels", name), os.path.join(tmp, "kernels", name))
        store = os.path.join(tmp, "kernels", "store")
        shutil.copy(os.path.join(store, "v7_token_walk.cu"), os.path.join(store, "v8_learner.cu"))
        listed = subprocess.run([sys.executable, GEN, "--list", tmp, os.path.join(src, "lab", "store", "emulate", "mutants.py")],
                                capture_output=True, text=True)
        names = listed.stdout.split()
        check(listed.returncode == 0 and all(v in names for v in ("v4_rope_quant_store", "v5_tile_inflight",
                                                                  "v7_token_walk", "v8_learner")),
              "the variants that include a header ALSO_EMULATED names are emulated, a learner's copy too")
        check("v3_pdl_one_trip" not in names, "a variant that includes none of them and no tensor-core header is not")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
