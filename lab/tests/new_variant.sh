#!/usr/bin/env bash
# `kernlab new-variant` in a scratch copy of the source tree (--source-dir): the next free number
# is proposed, every name that carries the old one is renamed (so the copy compiles and links
# beside the original), taken numbers and existing files are refused, names are checked.
# Usage: new_variant.sh path/to/kernlab [path/to/nvcc] [path/to/cc]
set -uo pipefail
kl=${1:?usage: new_variant.sh path/to/kernlab [nvcc] [cc]}
nvcc=${2:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
cc=${3:-cc}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 passes=0
ok() { echo "ok   $*"; passes=$((passes + 1)); }
bad() { echo "FAIL $*" >&2; fails=$((fails + 1)); }

# The scratch tree: the kernels the repository tracks copied (new files land there; a learner's own
# variants stay out, so the numbers below hold beside them), the rest of the sources linked.
src=$tmp/src
mkdir -p "$src"
# A copy of the tree whose git index does not describe it (a file listed is missing) is copied whole.
if git rev-parse --git-dir > /dev/null 2>&1 && git ls-files -z kernels | xargs -0 -n1 test -e 2> /dev/null; then
  git ls-files -z kernels | xargs -0 -I{} cp --parents {} "$src/"
else
  cp -r kernels "$src/"
fi
tree_sum() { find kernels -type f -print0 | sort -z | xargs -0 md5sum | md5sum; }
before=$(tree_sum)
ln -s "$PWD/lab" "$src/lab"
ln -s "$PWD/perf" "$src/perf"
nv() { "$kl" new-variant "$@" --source-dir "$src" > "$tmp/out" 2> "$tmp/err"; }

# Strong global symbols an object defines (functions, data: not the weak template instances
# every variant shares through its headers), one a line.
strong() { nm -g --defined-only "$1" | awk '$2 ~ /^[TDBRC]$/ {print $3}' | sort -u; }
# The copy's strong symbols that the built kernlab defines already: a second definition at link.
# Its own registration is left out: a learner's untracked variant of the same name may be built in,
# and the scratch tree (tracked files only) cannot see it.
clashes() {
  comm -12 <(strong "$1" | grep -v '^kl_variant_\(ptr\|desc\)_') \
           <(nm --defined-only "$kl" | awk '$2 ~ /^[TDBRC]$/ {print $3}' | sort -u)
}
# Code of a file without its opening comment and summary (they name the original, on purpose).
# Written to a file, not piped into grep -q: with pipefail an early exit of grep is a failure.
body() { awk 'NR == 1 && /^\/\*/ {c = 1} c && /\*\// {c = 0; next} !c' "$1" | grep -v '\.summary = "a copy of' > "$tmp/body"; }

# ---- rmsnorm: the default is the gated variant (v3 on sm_90), the number the next free one.
nv rmsnorm my_idea; rc=$?
f=$src/kernels/rmsnorm/v4_my_idea.cu
[ $rc -eq 0 ] && [ -s "$f" ] && grep -q "a copy of rmsnorm/v3_pdl_residual_early" "$tmp/out" \
  && ok "rmsnorm my_idea: v4_my_idea.cu, a copy of the gated v3" || bad "rmsnorm my_idea: rc=$rc $(cat "$tmp/out" "$tmp/err")"
for cmd in "cmake --build build" "build/kernlab check rmsnorm --variant v4_my_idea" \
           "build/kernlab bench rmsnorm --variant v4_my_idea"; do
  grep -qF "$cmd" "$tmp/out" || bad "new-variant does not print '$cmd': $(cat "$tmp/out")"
done
grep -qE 'KL_VARIANT\(rmsnorm, v4_my_idea, launch, \.min_cc = 70,' "$f" \
  && grep -q '\.summary = "a copy of v3_pdl_residual_early, to be edited' "$f" \
  && ok "the copy registers as v4_my_idea, its summary says whose copy it is" || bad "registration: $(grep -A1 KL_VARIANT "$f")"
body "$f"
old=$(grep -nE 'rmsnorm_v3|KL_V3_VPT|"[^"]*v3_pdl_residual_early' "$tmp/body")
[ -z "$old" ] && grep -q 'rmsnorm_v4<' "$tmp/body" && grep -q 'kl_rmsnorm_check_params(p, "v4_my_idea")' "$tmp/body" \
  && ok "kernel names, macros and messages renamed (rmsnorm_v3 -> rmsnorm_v4)" || bad "old names left: $old"
grep -q "^/\* v4_my_idea: TODO" <(head -1 "$f") && grep -q "this file is a copy of v3_pdl_residual_early" "$f" \
  && ! grep -q "What changed from v2" "$f" && ok "the opening comment is a TODO naming the original" \
  || bad "header: $(head -8 "$f")"
diff <(grep '^#include' kernels/rmsnorm/v3_pdl_residual_early.cu) <(grep '^#include' "$f") > /dev/null \
  && ok "the same #include lines" || bad "includes differ"

# Taken numbers and existing files: refused, nothing written or changed.
sum=$(md5sum < "$f")
nv rmsnorm v4_my_idea; rc=$?
[ $rc -eq 1 ] && [ "$(md5sum < "$f")" = "$sum" ] && grep -q "v4 is taken" "$tmp/err" \
  && ok "an existing file is refused and left as it was" || bad "existing file: rc=$rc $(cat "$tmp/err")"
nv rmsnorm v2_x; rc=$?
[ $rc -eq 1 ] && grep -q "v2 is taken (rmsnorm/v2_pdl); the next free number is v5: kernlab new-variant rmsnorm v5_x" "$tmp/err" \
  && [ ! -e "$src/kernels/rmsnorm/v2_x.cu" ] && ok "a taken number is refused, naming the next free one (v5: the file just written counts)" \
  || bad "taken number: rc=$rc $(cat "$tmp/err")"
nv rmsnorm v7_explicit --from v0_naive; rc=$?
body "$src/kernels/rmsnorm/v7_explicit.cu"
[ $rc -eq 0 ] && grep -q 'rmsnorm_v7' "$tmp/body" && ! grep -q 'rmsnorm_v0' "$tmp/body" && ok "--from v0_naive with a free number of one's own" \
  || bad "--from: rc=$rc $(cat "$tmp/err")"
nv rmsnorm; rc=$?
[ $rc -eq 0 ] && [ -s "$src/kernels/rmsnorm/v8_my_idea.cu" ] && ok "no NAME: v8_my_idea, after the highest (v7)" \
  || bad "no NAME: rc=$rc $(cat "$tmp/out" "$tmp/err")"
for name in BadName 4x v4 v04_x my-idea "" "v9_"; do
  nv rmsnorm "$name"; rc=$?
  [ $rc -eq 2 ] && grep -q "^kernlab new-variant: NAME" "$tmp/err" && ok "NAME '$name': a usage error" \
    || bad "NAME '$name': rc=$rc $(cat "$tmp/err")"
done
nv rmsnorm x --from v9_nosuch; rc=$?
[ $rc -eq 2 ] && grep -q -- "--from 'v9_nosuch'" "$tmp/err" && ok "--from a variant that does not exist: a usage error" \
  || bad "--from nosuch: rc=$rc $(cat "$tmp/err")"
nv no_such_module x; [ $? -eq 2 ] && ok "an unknown module: a usage error" || bad "unknown module"
[ "$(tree_sum)" = "$before" ] && ok "the real tree is untouched" || bad "kernels/ changed while the scratch tree was written"

# ---- radix (C, the CPU's targets): every entry point the file defines gets a name of its own.
nv radix simd_copy; rc=$?
f=$src/kernels/radix/v2_simd_copy.c
if [ $rc -eq 0 ] && [ -s "$f" ]; then
  ok "radix: v2_simd_copy.c, a copy of the gated v1_simd"
  if "$cc" -std=gnu11 -O1 -I"$src" -c "$f" -o "$tmp/radix.o" 2> "$tmp/cc_err"; then
    c=$(clashes "$tmp/radix.o")
    [ -z "$c" ] && grep -q kl_radix_cmp_simd_v2 <(strong "$tmp/radix.o") \
      && ok "radix copy compiles and defines nothing kernlab defines (kl_radix_cmp_simd -> kl_radix_cmp_simd_v2)" \
      || bad "radix copy would not link: $c"
  else bad "radix copy does not compile: $(head -20 "$tmp/cc_err")"; fi
else bad "radix: rc=$rc $(cat "$tmp/err")"; fi

# ---- attention_prefill: the exercises start from the gated variant (perf/targets names it), the
# tensor-core kernel `new-variant` copies when no --from is given.
# The copy takes the number after the module's highest (v11 and up exist beside v10).
pg=$(awk -F, '$1 == "attention_prefill" && $2 == "*" && $3 == "gated_variant" {print $4}' perf/targets/sm_90.csv)
pgn=${pg#v}; pgn=${pgn%%_*}
pn=$(($(ls kernels/attention_prefill | sed -n 's/^v\([0-9]*\)_.*\.cu$/\1/p' | sort -n | tail -1) + 1))
nv attention_prefill; rc=$?
f=$src/kernels/attention_prefill/v${pn}_my_idea.cu
[ -n "$pg" ] && [ $rc -eq 0 ] && [ -s "$f" ] && grep -q "a copy of $pg\b" "$f" \
  && ok "attention_prefill (no --from): v${pn}_my_idea.cu, a copy of the gated $pg" || bad "prefill: gated '$pg' rc=$rc $(cat "$tmp/err")"
body "$f"
old=$(grep -nE "prefill_v${pgn}\b|\"[^\"]*$pg" "$tmp/body")
[ -z "$old" ] && grep -qE "prefill_v${pn}<T, D[,>]" "$tmp/body" && grep -qE "KL_VARIANT\(attention_prefill, v${pn}_my_idea, launch, \.min_cc = 90" "$f" \
  && ok "no old kernel name or message left (prefill_v${pgn} -> prefill_v${pn})" || bad "prefill: old names left: $old"
diff <(grep '^#include' kernels/attention_prefill/$pg.cu) <(grep '^#include' "$f") > /dev/null \
  && grep -q '^namespace {' "$f" && grep -q '^} // namespace' "$f" \
  && ok "the same includes and anonymous namespace (what the emulator takes a variant file by)" || bad "prefill structure"
if [ -x "$nvcc" ]; then
  # sm_90a: the Hopper variants' code exists only there (KL_SM90A)
  if "$nvcc" -std=c++20 --expt-relaxed-constexpr -D_GNU_SOURCE -I"$src" --generate-code=arch=compute_90a,code=sm_90a \
       -x cu -c "$f" -o "$tmp/prefill.o" 2> "$tmp/nvcc_err"; then
    c=$(clashes "$tmp/prefill.o")
    [ -z "$c" ] && grep -q kl_variant_ptr_attention_prefill_v${pn}_my_idea <(strong "$tmp/prefill.o") \
      && ok "the prefill copy compiles (nvcc -c, sm_90a) and defines nothing kernlab defines" || bad "prefill copy would not link: $c"
  else bad "the prefill copy does not compile: $(grep -m5 error "$tmp/nvcc_err")"; fi
  f=$src/kernels/rmsnorm/v4_my_idea.cu
  if "$nvcc" -std=c++20 --expt-relaxed-constexpr -D_GNU_SOURCE -I"$src" --generate-code=arch=compute_90a,code=sm_90a \
       -x cu -c "$f" -o "$tmp/rmsnorm.o" 2> "$tmp/nvcc_err"; then
    c=$(clashes "$tmp/rmsnorm.o")
    [ -z "$c" ] && ok "the rmsnorm copy compiles and defines nothing kernlab defines" || bad "rmsnorm copy would not link: $c"
  else bad "the rmsnorm copy does not compile: $(grep -m5 error "$tmp/nvcc_err")"; fi
else
  echo "note: no nvcc at '$nvcc': the copies' compile checks did not run"
fi

echo "$passes passed, $fails failed"
exit $((fails > 0))
