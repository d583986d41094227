#!/usr/bin/env bash
# The kernlab command as users meet it: list, verify on the goldens and on cases written by
# hand, and each malformed case giving one clean FAIL line naming the file (exit 1, no crash).
set -uo pipefail
kl=${1:?usage: cli.sh path/to/kernlab}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 passes=0
ok() { echo "ok   $*"; passes=$((passes + 1)); }
bad() { echo "FAIL $*" >&2; fails=$((fails + 1)); }

"$kl" list > "$tmp/list" || bad "list exited nonzero"
grep -q '^rmsnorm ' "$tmp/list" && grep -q 'rmsnorm/v0_naive' "$tmp/list" && ok "list shows rmsnorm and its variants" \
  || bad "list: $(cat "$tmp/list")"

"$kl" verify --reference golden/rmsnorm/*/ > "$tmp/v" 2>&1 && ! grep -q '^FAIL' "$tmp/v" \
  && ok "verify --reference passes every rmsnorm golden" || bad "verify --reference: $(cat "$tmp/v")"
"$kl" verify --reference golden > "$tmp/all" 2>&1 && ok "verify --reference golden/ finds and passes every case" \
  || bad "verify golden/: $(grep -v ^PASS "$tmp/all")"
[ "$(grep -c '^PASS' "$tmp/all")" -ge 11 ] || bad "verify golden/ checked too few cases"

# A case written by someone else, with a tool other than ours: plain Python writing .npy by hand.
python3 - "$tmp/hand" <<'PY'
import json, os, struct, sys, math
d = sys.argv[1]; os.makedirs(d)
def npy(name, shape, vals):
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % "".join("%d, " % s for s in shape)
    hdr += " " * ((64 - (10 + len(hdr) + 1) % 64) % 64) + "\n"
    with open(os.path.join(d, name + ".npy"), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + struct.pack("<%df" % len(vals), *vals))
x = [1.0, -2.0, 0.5, 4.0, 0.25, 3.0]; w = [0.5, 1.0, 2.0]; eps = 0.001
out = []
for r in range(2):
    row = x[3 * r:3 * r + 3]; inv = 1 / math.sqrt(sum(v * v for v in row) / 3 + eps)
    out += [row[i] * inv * w[i] for i in range(3)]
npy("x", (2, 3), x); npy("weight", (3,), w); npy("out", (2, 3), out)
json.dump({"module": "rmsnorm", "case": "by_hand", "dtype": "bf16", "params": {"eps": eps}, "note": "extra keys are ignored"},
          open(os.path.join(d, "meta.json"), "w"))
PY
"$kl" verify --reference "$tmp/hand" > "$tmp/h" 2>&1 && grep -q '^PASS rmsnorm by_hand reference' "$tmp/h" \
  && ok "a hand-written case passes" || bad "hand-written case: $(cat "$tmp/h")"

# Broken cases: each must give exactly one FAIL line that names the file, and exit 1.
mk() { rm -rf "$tmp/$1"; cp -r golden/rmsnorm/odd_hidden_111 "$tmp/$1"; }
mk truncated; head -c 100 golden/rmsnorm/odd_hidden_111/x.npy > "$tmp/truncated/x.npy"
mk magic; printf 'XXXXXXXXXXXXXXXX' | dd of="$tmp/magic/weight.npy" conv=notrunc status=none
mk missing; rm "$tmp/missing/out.npy"
mk badjson; echo '{"module": "rmsnorm",' > "$tmp/badjson/meta.json"
mk unknown; sed -i 's/"rmsnorm"/"no_such_module"/' "$tmp/unknown/meta.json"
mk shape; cp golden/rmsnorm/fp32_small/weight.npy "$tmp/shape/weight.npy"
mk dtype; sed -i 's/"bf16"/"fp8"/' "$tmp/dtype/meta.json"
mkdir "$tmp/empty"
for c in truncated:x.npy magic:weight.npy missing:out.npy badjson:meta.json unknown:meta.json shape:weight.npy \
         dtype:meta.json empty:meta.json; do
  name=${c%%:*} file=${c#*:}
  "$kl" verify --reference "$tmp/$name" > "$tmp/out_$name" 2> "$tmp/err_$name"
  rc=$?
  lines=$(grep -c . "$tmp/out_$name")
  if [ $rc -eq 1 ] && [ "$lines" -eq 1 ] && grep -q "^FAIL .*$tmp/$name/$file" "$tmp/out_$name"; then
    ok "broken case '$name' fails cleanly: $(cut -c1-140 "$tmp/out_$name")"
  else
    bad "broken case '$name': rc=$rc lines=$lines: $(cat "$tmp/out_$name" "$tmp/err_$name")"
  fi
done

# Broken attention_decode page tables: one FAIL line naming the array, never a GPU fault.
wi4() { # wi4 FILE v1 v2 ...: a 1-d <i4 .npy written by hand
  python3 - "$@" <<'PY'
import struct, sys
path, vals = sys.argv[1], [int(v) for v in sys.argv[2:]]
hdr = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d,), }" % len(vals)
hdr += " " * ((64 - (10 + len(hdr) + 1) % 64) % 64) + "\n"
open(path, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + struct.pack("<%di" % len(vals), *vals))
PY
}
src=golden/attention_decode/kv_len_0_in_batch  # 3 requests of 10, 0, 5 tokens, page 16, 3 pages
for c in past_pool:kv_indices.npy decreasing:kv_indptr.npy last_zero:kv_last_page_len.npy \
         last_too_big:kv_last_page_len.npy indptr_end:kv_indptr.npy; do
  name=${c%%:*} file=${c#*:}
  rm -rf "$tmp/$name"; cp -r $src "$tmp/$name"
  case $name in
    past_pool) wi4 "$tmp/$name/kv_indices.npy" 0 99 ;;
    decreasing) wi4 "$tmp/$name/kv_indptr.npy" 0 1 0 2 ;;
    last_zero) wi4 "$tmp/$name/kv_last_page_len.npy" 0 0 5 ;;
    last_too_big) wi4 "$tmp/$name/kv_last_page_len.npy" 17 0 5 ;;
    indptr_end) wi4 "$tmp/$name/kv_indptr.npy" 0 1 1 3 ;;
  esac
  "$kl" verify "$tmp/$name" > "$tmp/out_$name" 2> "$tmp/err_$name"; rc=$?
  if [ $rc -eq 1 ] && ! grep -qv "^FAIL .*$tmp/$name/$file" "$tmp/out_$name" && grep -q . "$tmp/out_$name"; then
    ok "broken page table '$name' fails cleanly for every implementation: $(head -1 "$tmp/out_$name" | cut -c1-150)"
  else
    bad "broken page table '$name': rc=$rc: $(cat "$tmp/out_$name" "$tmp/err_$name")"
  fi
done
rm -rf "$tmp/gqa"; cp -r $src "$tmp/gqa"
python3 - "$tmp/gqa" <<'PY'
import struct, sys  # q with 3 qo heads over 2 kv heads: not a GQA group
d = sys.argv[1]; hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 3, 64), }"
hdr += " " * ((64 - (10 + len(hdr) + 1) % 64) % 64) + "\n"
open(d + "/q.npy", "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + struct.pack("<576f", *([0.5] * 576)))
PY
"$kl" verify --reference "$tmp/gqa" > "$tmp/out_gqa" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "^FAIL .*q.npy.*not a multiple" "$tmp/out_gqa" && ok "qo heads not a multiple of kv heads fail cleanly" \
  || bad "gqa: rc=$rc $(cat "$tmp/out_gqa")"

# Usage errors exit 2; an unknown module for check is a usage error.
"$kl" verify > /dev/null 2>&1; [ $? -eq 2 ] && ok "verify without cases exits 2" || bad "verify without cases"
"$kl" check no_such_module > /dev/null 2>&1; [ $? -eq 2 ] && ok "check of an unknown module exits 2" || bad "check unknown"
"$kl" frobnicate > /dev/null 2>&1; [ $? -eq 2 ] && ok "unknown command exits 2" || bad "unknown command"
# (new-variant writes into a scratch tree here, never into kernels/: lab/tests/new_variant.sh tests it in full)
mkdir -p "$tmp/nvsrc" && cp -r kernels "$tmp/nvsrc/"
"$kl" new-variant rmsnorm BadName --source-dir "$tmp/nvsrc" > /dev/null 2>&1; [ $? -eq 2 ] && ok "new-variant rejects a badly formed name" || bad "new-variant name"
"$kl" new-variant no_such_module v9_x --source-dir "$tmp/nvsrc" > /dev/null 2>&1; [ $? -eq 2 ] && ok "new-variant rejects an unknown module" || bad "new-variant module"
"$kl" new-variant rmsnorm v0_naive --source-dir "$tmp/nvsrc" > /dev/null 2>&1; [ $? -eq 1 ] && ok "new-variant refuses to overwrite a variant" || bad "new-variant overwrite"
"$kl" ceilings > /dev/null 2> "$tmp/ceil"; rc=$?
if "$(dirname "$kl")/kl_gpu_guard" true > /dev/null; then ok "ceilings (GPU present: not checked here)"
else [ $rc -eq 1 ] && grep -q "no CUDA device" "$tmp/ceil" && ok "ceilings without a GPU: a clean refusal, exit 1" || bad "ceilings: rc=$rc $(cat "$tmp/ceil")"; fi


# ---- Hostile and broken inputs (issues 15 and 16): no crash, no hang, nothing written outside
# the output folder. Every command runs under a timeout; an exit status of 124 (timeout) or
# above 128 (a signal) is a failure whatever the test expected.
run() { # [T=seconds] run WANT_RC NAME CMD...: stdout to $tmp/o_NAME, stderr to $tmp/e_NAME; 0 if the status is WANT_RC
  local want=$1 name=$2; shift 2
  timeout "${T:-20}" "$@" > "$tmp/o_$name" 2> "$tmp/e_$name" < /dev/null
  local rc=$?
  if [ $rc -eq 124 ] || [ $rc -gt 128 ]; then bad "$name: hung or died (status $rc): $(head -c 300 "$tmp/e_$name")"; return 1; fi
  [ $rc -eq "$want" ] || { bad "$name: status $rc, want $want: $(head -c 400 "$tmp/o_$name" "$tmp/e_$name")"; return 1; }
}
# one_fail NAME FILE: exactly one line on stdout, a FAIL naming FILE.
one_fail() { [ "$(grep -c . "$tmp/o_$1")" -eq 1 ] && grep -q "^FAIL .*$2" "$tmp/o_$1"; }
h=$tmp/hostile; mkdir -p "$h"
# npy DIR NAME DESCR SHAPE_TEXT DATA_BYTES [RAW_DICT]: a .npy with any header, padded like numpy's.
npy() {
  python3 - "$@" <<'PY'
import struct, sys
d, name, descr, shape, nbytes = sys.argv[1:6]
hdr = sys.argv[6] if len(sys.argv) > 6 else "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
hdr += " " * ((64 - (10 + len(hdr) + 1) % 64) % 64) + "\n"
with open("%s/%s.npy" % (d, name), "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + b"\0" * int(nbytes))
PY
}
case_of() { rm -rf "$h/$2"; cp -r "golden/$1" "$h/$2"; }

# 1. dims x element size overflowing 64 bits (to 0): a FAIL naming the array, not a crash.
case_of index/fp32_small ovf_index
npy "$h/ovf_index" table '<f4' '(1099511627776, 4194304)' 0
npy "$h/ovf_index" ids '<i4' '(0,)' 0
npy "$h/ovf_index" out '<f4' '(0, 4194304)' 0
case_of rope/fp32_small ovf_rope; npy "$h/ovf_rope" q '<f4' '(1099511627776, 4194304, 1)' 0
case_of store/fp32_small ovf_store; npy "$h/ovf_store" k '<f4' '(1099511627776, 4194304, 1)' 0
for c in ovf_index:table.npy ovf_rope:q.npy ovf_store:k.npy; do
  run 1 "${c%%:*}" "$kl" verify --reference "$h/${c%%:*}" && one_fail "${c%%:*}" "$h/${c%%:*}/${c#*:}" \
    && ok "dims overflowing 64 bits: $(cut -c1-120 "$tmp/o_${c%%:*}")" || bad "overflow ${c%%:*}: $(cat "$tmp/o_${c%%:*}")"
done

# 2. A header far larger than the file, meta.json a directory, a trace that is /dev/zero: each
# is its case's FAIL line, and the run goes on to the next case (a golden that passes).
case_of rmsnorm/odd_hidden_111 huge; npy "$h/huge" x '<f4' '(1099511627776, 64)' 64
case_of rmsnorm/odd_hidden_111 metadir; rm "$h/metadir/meta.json"; mkdir "$h/metadir/meta.json"
case_of radix/basic_page1 zero; ln -sf /dev/zero "$h/zero/trace.jsonl"
for c in huge:x.npy metadir:meta.json zero:trace.jsonl; do
  n=${c%%:*}
  run 1 "$n" "$kl" verify --reference "$h/$n" golden/rmsnorm/fp32_small \
    && [ "$(grep -c '^FAIL' "$tmp/o_$n")" -eq 1 ] && grep -q "^FAIL .*$h/$n/${c#*:}" "$tmp/o_$n" \
    && grep -q '^PASS rmsnorm fp32_small reference' "$tmp/o_$n" && ! grep -q 'out of .*memory' "$tmp/e_$n" \
    && ok "case '$n' is one FAIL, the next case still runs: $(grep ^FAIL "$tmp/o_$n" | cut -c1-110)" \
    || bad "case '$n': $(cat "$tmp/o_$n" "$tmp/e_$n" | head -c 600)"
done

# 3. FIFOs in place of inputs must not block; directory links must not loop or count twice.
for c in fifo_npy:rmsnorm/odd_hidden_111:x.npy fifo_meta:rmsnorm/odd_hidden_111:meta.json \
         fifo_trace:radix/basic_page1:trace.jsonl; do
  IFS=: read -r n src file <<< "$c"
  case_of "$src" "$n"; rm "$h/$n/$file"; mkfifo "$h/$n/$file"
  run 1 "$n" "$kl" verify --reference "$h/$n" && one_fail "$n" "$h/$n/$file" && ok "a FIFO as $file is one FAIL" \
    || bad "FIFO $file: $(cat "$tmp/o_$n")"
done
mkdir -p "$h/walk/coll"; cp -r golden/rmsnorm/fp32_small "$h/walk/coll/case1"
ln -s . "$h/walk/coll/self"; ln -s .. "$h/walk/coll/up"
run 0 walk "$kl" verify --reference "$h/walk/coll" && [ "$(grep -c . "$tmp/o_walk")" -eq 1 ] \
  && ok "links to . and .. in a collection: the one case, once" || bad "walk: $(head -5 "$tmp/o_walk")"
mkdir -p "$h/rfifo"; mkfifo "$h/rfifo/rmsnorm.jsonl"
run 1 rfifo "$kl" report --results "$h/rfifo" --out "$h/rfifo_out" && grep -q "$h/rfifo/rmsnorm.jsonl" "$tmp/e_rfifo" \
  && ok "report: a FIFO results file is skipped, named" || bad "report FIFO: $(cat "$tmp/e_rfifo")"

# 4. report writes only inside --out: a row's module is a registered name, never a path.
mkdir -p "$h/trav/res" "$h/trav/a/b/c"
sed 's/"module":"rmsnorm"/"module":"..\/..\/..\/x"/' lab/tests/report_fixture/data/rmsnorm.jsonl > "$h/trav/res/x.jsonl"
grep -q '"module":"../../../x"' "$h/trav/res/x.jsonl" || bad "traversal fixture not made"
run 1 trav "$kl" report --results "$h/trav/res" --out "$h/trav/a/b/c"
[ -z "$(find "$h/trav" -name 'x.md')" ] && grep -q "x.jsonl" "$tmp/e_trav" \
  && ok "report refuses a module name that is a path" || bad "traversal: $(find "$h/trav" -name '*.md') $(cat "$tmp/e_trav")"

# 5. bench never truncates an existing results file it did not replace.
mkdir -p "$h/bench"; echo keep > "$h/bench/existing.jsonl"
run 2 bench_badvar "$kl" bench rmsnorm --variant nosuch --json "$h/bench/existing.jsonl"
[ "$(cat "$h/bench/existing.jsonl")" = keep ] && ok "bench with a bad --variant leaves --json untouched" || bad "bench --variant nosuch truncated"
run 2 bench_badwl "$kl" bench radix --workload nosuch --json "$h/bench/existing.jsonl"
[ "$(cat "$h/bench/existing.jsonl")" = keep ] && [ "$(ls -A "$h/bench")" = existing.jsonl ] \
  && ok "bench radix with a bad --workload: usage error, --json untouched" || bad "bench radix --workload nosuch: $(ls -A "$h/bench")"
run 0 bench_cpu "$kl" bench radix --variant v0_scalar --workload match_hot_p1 --json "$h/bench/existing.jsonl"
[ "$(grep -c '"module":"radix"' "$h/bench/existing.jsonl")" -eq 1 ] && [ "$(ls -A "$h/bench")" = existing.jsonl ] \
  && ok "a completed bench replaces --json with its rows, no stray files" || bad "bench radix: $(ls -A "$h/bench") $(cat "$tmp/e_bench_cpu")"
run 0 bench_two "$kl" bench radix --variant v0_scalar --workload match_hot_p1,match_cold_p16 --json "$h/bench/two.jsonl"
[ "$(grep -c '"workload":"match_hot_p1"' "$h/bench/two.jsonl")" -eq 1 ] && [ "$(grep -c '"workload":"match_cold_p16"' "$h/bench/two.jsonl")" -eq 1 ] \
  && [ "$(wc -l < "$h/bench/two.jsonl")" -eq 2 ] && ok "bench --workload A,B runs both workloads and no other" || bad "bench --workload A,B: $(cut -c1-80 "$h/bench/two.jsonl")"
run 2 bench_badwl2 "$kl" bench rmsnorm --workload decode-64,nosuch
grep -q "'nosuch': no such workload" "$tmp/e_bench_badwl2" && ok "bench --workload A,nosuch names the unknown one" || bad "bench --workload A,nosuch: $(cat "$tmp/e_bench_badwl2")"
cp "$h/bench/existing.jsonl" "$tmp/existing.before"
run 2 bench_badwl4 "$kl" bench allreduce --workload 8KB,1MB-world2,nosuch --json "$h/bench/existing.jsonl"
grep -q "no workload named 'nosuch'" "$tmp/e_bench_badwl4" && cmp -s "$h/bench/existing.jsonl" "$tmp/existing.before" \
  && ok "bench allreduce --workload A,B,nosuch names the unknown one before asking for GPUs" \
  || bad "bench allreduce --workload A,B,nosuch: $(cat "$tmp/e_bench_badwl4")"
run 2 bench_badwl3 "$kl" bench radix --workload match_hot_p1,nosuch
grep -q 'no workload named "nosuch"' "$tmp/e_bench_badwl3" && ok "bench radix --workload A,nosuch names the unknown one" || bad "bench radix --workload A,nosuch: $(cat "$tmp/e_bench_badwl3")"
rm -f "$h/bench/two.jsonl"
echo keep > "$h/bench/existing.jsonl"
if ! "$(dirname "$kl")/kl_gpu_guard" true > /dev/null 2>&1; then
  run 77 bench_nogpu "$kl" bench rmsnorm --json "$h/bench/existing.jsonl"
  [ "$(cat "$h/bench/existing.jsonl")" = keep ] && [ "$(ls -A "$h/bench")" = existing.jsonl ] \
    && tail -1 "$tmp/e_bench_nogpu" | grep -q "nothing benched: benchmarks need a GPU" \
    && ok "bench without a GPU: nothing benched (77), --json untouched, no stray files" || bad "bench without a GPU: $(ls -A "$h/bench") $(cat "$h/bench/existing.jsonl")"
fi

# 6. A path too long for the case buffer is refused, never truncated into another case (one that
# does not exist is a usage error naming it; a FAIL for one that exists and is too long).
long=golden/rmsnorm/odd_hidden_111$(printf '/.%.0s' $(seq 600))/nosuch
run 2 longpath "$kl" verify --reference "$long" && ! grep -q '^PASS' "$tmp/o_longpath" && grep -q "nosuch" "$tmp/e_longpath" \
  && ok "a path longer than the buffer fails" || bad "long path: $(cut -c1-200 "$tmp/o_longpath")"

# 7. report --out: a regular file is an error with errno; a missing folder is made like mkdir -p.
touch "$h/outfile"
run 1 outfile "$kl" report --results lab/tests/report_fixture/data --out "$h/outfile"
! grep -q wrote "$tmp/o_outfile" && grep -q "$h/outfile.*Not a directory\|$h/outfile.*File exists" "$tmp/e_outfile" \
  && ok "report --out a file: an errno, nothing claimed" || bad "report --out file: $(cat "$tmp/o_outfile" "$tmp/e_outfile")"
run 0 outdeep "$kl" report --results lab/tests/report_fixture/data --out "$h/deep/er/out" \
  && [ -s "$h/deep/er/out/rmsnorm.md" ] && [ -s "$h/deep/er/out/img/rmsnorm-roofline.svg" ] \
  && ok "report --out makes missing parent folders" || bad "report --out deep: $(cat "$tmp/e_outdeep")"

# 8. new-variant caps the name (it becomes a file name and C identifiers).
longname=v1_$(printf 'a%.0s' $(seq 250))
run 2 newlong "$kl" new-variant rmsnorm "$longname" --source-dir "$tmp/nvsrc" && [ ! -e "kernels/rmsnorm/$longname.cu" ] \
  && ok "new-variant refuses a 253-character name" || bad "new-variant long name: $(cat "$tmp/e_newlong")"
rm -f "kernels/rmsnorm/$longname.cu" 2> /dev/null

# 9. meta.json must be one JSON object and nothing after it; names hold no control characters.
case_of rmsnorm/odd_hidden_111 trailing; echo ' garbage' >> "$h/trailing/meta.json"
case_of rmsnorm/odd_hidden_111 twoobj; cat golden/rmsnorm/odd_hidden_111/meta.json >> "$h/twoobj/meta.json"
case_of rmsnorm/odd_hidden_111 ctrl
python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); m["case"]="x\nPASS rmsnorm forged reference rel_l2=0 max_abs=0"; json.dump(m,open(sys.argv[1],"w"))' "$h/ctrl/meta.json"
case_of rmsnorm/odd_hidden_111 falsey
npy "$h/falsey" weight '' '' 444 "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (111,), }"
case_of rmsnorm/odd_hidden_111 dupkey
npy "$h/dupkey" weight '' '' 444 "{'descr': '<f4', 'descr': '<i4', 'fortran_order': False, 'shape': (111,), }"
for c in trailing:meta.json twoobj:meta.json ctrl:meta.json falsey:weight.npy dupkey:weight.npy; do
  n=${c%%:*}
  run 1 "$n" "$kl" verify --reference "$h/$n" && one_fail "$n" "$h/$n/${c#*:}" && ok "'$n' is one FAIL naming ${c#*:}" \
    || bad "'$n': $(cat "$tmp/o_$n" "$tmp/e_$n")"
done

# 10. A dangling or looping meta.json link in a collection is a FAIL, not a silent skip.
mkdir -p "$h/links"; cp -r golden/rmsnorm/fp32_small "$h/links/good"
mkdir "$h/links/dangling" "$h/links/looping"
ln -s nowhere.json "$h/links/dangling/meta.json"; ln -s meta.json "$h/links/looping/meta.json"
run 1 links "$kl" verify --reference "$h/links" && grep -q "^FAIL .*$h/links/dangling/meta.json" "$tmp/o_links" \
  && grep -q "^FAIL .*$h/links/looping/meta.json" "$tmp/o_links" && grep -q '^PASS' "$tmp/o_links" \
  && ok "dangling and looping meta.json links are FAILs" || bad "links: $(cat "$tmp/o_links")"
mkdir -p "$h/many"
for i in $(seq -w 0 33); do cp lab/tests/report_fixture/data/rmsnorm.jsonl "$h/many/a$i.jsonl"; done
sed 's/"module":"rmsnorm"/"module":"index"/' lab/tests/report_fixture/data/rmsnorm.jsonl > "$h/many/z_index.jsonl"
: > "$h/many/empty.jsonl"; { head -1 lab/tests/report_fixture/data/rmsnorm.jsonl; echo 'not json'; } > "$h/many/badline.jsonl"
run 1 many "$kl" report --results "$h/many" --out "$h/many_out" && [ -s "$h/many_out/index.md" ] \
  && grep -q "empty.jsonl.*empty" "$tmp/e_many" && grep -q "badline.jsonl:2" "$tmp/e_many" \
  && ok "report reads all 37 files and names the skipped ones" || bad "report many: $(cat "$tmp/e_many")"

# 11. Option values: checked the same way everywhere; a missing one is named; usage errors exit 2.
for c in "check rmsnorm --seed -1" "check rmsnorm --seed ''" "bench rmsnorm --seed abc" "bench rmsnorm --seed -3"; do
  eval "run 2 seed \"\$kl\" $c" && grep -q -- "--seed" "$tmp/e_seed" && ok "$c: usage error" || bad "$c: $(cat "$tmp/e_seed")"
done
for c in "check rmsnorm --seed:--seed" "check rmsnorm --variant:--variant" "verify golden --variant:--variant" \
         "bench rmsnorm --json:--json" "bench rmsnorm --workload:--workload" "bench rmsnorm --seed:--seed" \
         "report --out:--out" "report --results:--results" "ceilings --json:--json"; do
  run 2 novalue "$kl" ${c%%:*} && grep -q -- "${c#*:} needs a value" "$tmp/e_novalue" \
    && ok "${c%%:*}: says it needs a value" || bad "${c%%:*}: $(cat "$tmp/e_novalue")"
done
run 2 vnosuch "$kl" verify --variant nosuch golden/rmsnorm/fp32_small && ok "verify --variant nosuch exits 2" \
  || bad "verify --variant nosuch"

# 12, 14. check without a GPU still checks the reference; the skip reason says why in plain words;
# with no variant run the check says "nothing checked" and exits 77. (With a GPU this checks every
# variant too: a longer timeout.)
want=0; "$(dirname "$kl")/kl_gpu_guard" true > /dev/null 2>&1 || want=77
T=300 run $want checkref "$kl" check rmsnorm --seed 1 && grep -q '^PASS rmsnorm .* reference' "$tmp/o_checkref" \
  && ! grep -q '^FAIL' "$tmp/o_checkref" && ok "check runs the reference part anywhere" \
  || bad "check reference: $(head -5 "$tmp/o_checkref")"
if ! "$(dirname "$kl")/kl_gpu_guard" true > /dev/null 2>&1; then
  grep -q '^SKIP rmsnorm .*no CUDA device (no driver\|^SKIP rmsnorm .*no CUDA device (none' "$tmp/o_checkref" \
    && ok "the skip reason says there is no device" || bad "skip reason: $(grep ^SKIP "$tmp/o_checkref" | head -2)"
fi

# 15. params that are not an object fail, naming meta.json.
case_of rmsnorm/odd_hidden_111 paramlist
python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); m["params"]=[1e-6]; json.dump(m,open(sys.argv[1],"w"))' "$h/paramlist/meta.json"
run 1 paramlist "$kl" verify --reference "$h/paramlist" && one_fail paramlist "$h/paramlist/meta.json" \
  && ok "params as a list fails naming meta.json" || bad "params list: $(cat "$tmp/o_paramlist")"

# kernlab story: every argument checked before the device (usage errors exit 2, nothing written);
# without a GPU a clean refusal, exit 1, and still nothing written.
for args in "--layers 0" "--layers 33" "--prompt 31" "--prompt x" "--shared 15" "--prompt 64 --shared 64" \
            "--steps 63" "--seed -1" "--bogus" "--layers 2 extra" "--steps" "--kv fp9" "--kv"; do
  # shellcheck disable=SC2086
  "$kl" story --out "$tmp/story_usage" $args > /dev/null 2> "$tmp/story_err"; rc=$?
  [ $rc -eq 2 ] && [ ! -e "$tmp/story_usage" ] && grep -q "^kernlab story: " "$tmp/story_err" \
    && ok "story $args: a usage error, exit 2" || bad "story $args: rc=$rc $(cat "$tmp/story_err")"
done
"$kl" story --help > "$tmp/story_help" && grep -q -- "--shared N" "$tmp/story_help" && ok "story --help documents its options" || bad "story --help"
"$kl" story --kv fp9 > /dev/null 2> "$tmp/story_err"; grep -q -- "--kv fp9" "$tmp/story_err" && ok "story --kv fp9: the error names the argument" \
  || bad "story --kv fp9: $(cat "$tmp/story_err")"
if "$(dirname "$kl")/kl_gpu_guard" true > /dev/null; then ok "story without a GPU (GPU present: not checked here)"
else
  "$kl" story --tiny --out "$tmp/story_out" > /dev/null 2> "$tmp/story_err"; rc=$?
  [ $rc -eq 1 ] && [ ! -e "$tmp/story_out" ] && grep -q "^kernlab story: needs a CUDA device (" "$tmp/story_err" \
    && ok "story without a GPU: a clean refusal, exit 1, nothing written" || bad "story: rc=$rc $(cat "$tmp/story_err")"
  # --kv fp8: a variant missing from the build is named before the device (else the device refusal)
  "$kl" story --tiny --kv fp8 --out "$tmp/story_out" > /dev/null 2> "$tmp/story_err"; rc=$?
  [ $rc -eq 1 ] && [ ! -e "$tmp/story_out" ] \
    && grep -Eq "^kernlab story: (--kv fp8 needs [a-z_]+'s variant v[0-9]+_[a-z0-9_]+|needs a CUDA device \()" "$tmp/story_err" \
    && ok "story --kv fp8 without a GPU: exit 1, nothing written, what is missing named" || bad "story --kv fp8: rc=$rc $(cat "$tmp/story_err")"
fi

# ---- Every command: --help, usage errors, exit codes (issue 23; lab/CONTRACTS.md section 3) ----
commands="list verify check ceilings bench report story new-variant help"
for c in $commands; do
  for h in --help -h; do
    run 0 help "$kl" $c $h && grep -q "^usage: kernlab $c" "$tmp/o_help" && [ ! -s "$tmp/e_help" ] \
      || bad "$c $h: $(head -c 300 "$tmp/o_help" "$tmp/e_help")"
  done
  run 0 helpcmd "$kl" help $c && cmp -s "$tmp/o_help" "$tmp/o_helpcmd" || bad "help $c differs from $c --help"
  # an unknown option, named, on stderr; nothing on stdout
  run 2 bogus "$kl" $c --bogus-option && grep -q "^kernlab $c: unknown option '--bogus-option'" "$tmp/e_bogus" \
    && [ ! -s "$tmp/o_bogus" ] || bad "$c --bogus-option: $(cat "$tmp/o_bogus" "$tmp/e_bogus")"
done
ok "every command answers --help and -h on stdout (exit 0), kernlab help COMMAND the same, an unknown option exit 2 naming it"
for h in --help -h help; do
  run 0 top "$kl" $h && grep -q "^usage: kernlab COMMAND" "$tmp/o_top" && [ ! -s "$tmp/e_top" ] || bad "kernlab $h: $(cat "$tmp/e_top")"
  for c in $commands; do grep -q "^  kernlab $c" "$tmp/o_top" || bad "kernlab $h does not list $c"; done
done
ok "kernlab --help, -h and help list every command on stdout"
run 2 topnone "$kl" && grep -q "^usage: kernlab COMMAND" "$tmp/e_topnone" && ok "kernlab alone: usage on stderr, exit 2" || bad "kernlab alone"
run 2 helpx "$kl" help nosuch && grep -q "unknown command 'nosuch'" "$tmp/e_helpx" && ok "help nosuch: exit 2 naming it" || bad "help nosuch"
for c in "list extra:'extra'" "check:no MODULE given" "check rmsnorm extra:'extra'" "bench:no MODULE" \
         "ceilings extra:'extra'" "report extra:'extra'" "new-variant:no MODULE given" "verify:no CASE_DIR given" \
         "verify --reference --all golden:exclude each other" "check rmsnorm --variant v9_nosuch:'v9_nosuch'" \
         "check no_such_module:'no_such_module'" "bench no_such_module:'no_such_module'" "check rmsnorm --seed=x:--seed 'x'"; do
  run 2 usage "$kl" ${c%%:*} && grep -q -- "${c#*:}" "$tmp/e_usage" && grep -q "^usage: kernlab" "$tmp/e_usage" \
    && ok "${c%%:*}: a usage error naming ${c#*:}" || bad "${c%%:*}: $(cat "$tmp/e_usage")"
done
run 2 nope "$kl" verify golden/nope/ && grep -q "CASE_DIR 'golden/nope/': No such file or directory" "$tmp/e_nope" \
  && [ ! -s "$tmp/o_nope" ] && ok "verify golden/nope/: a usage error naming the path, no FAIL line" \
  || bad "verify golden/nope/: $(cat "$tmp/o_nope" "$tmp/e_nope")"
run 2 notdir "$kl" verify golden/rmsnorm/fp32_small/meta.json && grep -q "not a directory" "$tmp/e_notdir" \
  && ok "verify FILE: a usage error, not a directory" || bad "verify FILE: $(cat "$tmp/e_notdir")"

# Nothing checked is not a pass: its last line says so, exit 77 (ctest's skip). Needs no GPU here.
if ! "$(dirname "$kl")/kl_gpu_guard" true > /dev/null 2>&1; then
  for c in "check rmsnorm --variant v2_pdl --seed 1" "check attention_prefill --variant v10_pingpong --seed 1" \
           "check allreduce --variant v1_oneshot --seed 1" "verify --variant v2_pdl golden/rmsnorm" "verify --variant v3_pdl_residual_early golden/rmsnorm/fp32_small"; do
    T=120 run 77 nothing sh -c "\"\$0\" $c 2>&1" "$kl" && tail -1 "$tmp/o_nothing" | grep -q "nothing checked: .*no CUDA device" \
      && ok "$c: exit 77, the last line: $(tail -1 "$tmp/o_nothing" | cut -c1-90)" || bad "$c: $(tail -2 "$tmp/o_nothing")"
  done
  tail -1 "$tmp/e_checkref" | grep -q "^check rmsnorm: nothing checked: no variant of rmsnorm could run here" \
    && ok "check rmsnorm (the reference part passed, no variant ran): nothing checked, 77" || bad "check rmsnorm: $(tail -1 "$tmp/e_checkref")"
fi
T=120 run 0 radixcheck "$kl" check radix --seed 1 && tail -1 "$tmp/e_radixcheck" | grep -q "^check radix: 0 failures in [1-9][0-9]* variant runs" \
  && ok "check radix (CPU variants): judged, exit 0: $(tail -1 "$tmp/e_radixcheck")" || bad "check radix: $(tail -1 "$tmp/e_radixcheck")"

# stdout and stderr in one file: every line whole, the summary last (a full stdout buffer used to
# be written after the summary, splitting a verdict line).
"$kl" verify golden > "$tmp/both" 2>&1
bad_lines=$(grep -cvE '^(PASS|FAIL|SKIP) [a-z_]+ [^ ]+ [^ ]+ rel_l2=[^ ]+ max_abs=[^ ]+|^verify: [0-9]+ passed' "$tmp/both")
[ "$bad_lines" -eq 0 ] && tail -1 "$tmp/both" | grep -q "^verify: " && [ "$(wc -l < "$tmp/both")" -gt 100 ] \
  && ok "verify golden > log 2>&1: $(wc -l < "$tmp/both") whole lines, the summary last" \
  || bad "interleaved output: $(grep -vE '^(PASS|FAIL|SKIP) |^verify: ' "$tmp/both" | head -3)"

echo "$passes passed, $fails failed"
exit $((fails > 0))
