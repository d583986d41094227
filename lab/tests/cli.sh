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
"$kl" new-variant rmsnorm BadName > /dev/null 2>&1; [ $? -eq 2 ] && ok "new-variant rejects a badly formed name" || bad "new-variant name"
"$kl" new-variant no_such_module v9_x > /dev/null 2>&1; [ $? -eq 2 ] && ok "new-variant rejects an unknown module" || bad "new-variant module"
"$kl" new-variant rmsnorm v0_naive > /dev/null 2>&1; [ $? -eq 1 ] && ok "new-variant refuses to overwrite a variant" || bad "new-variant overwrite"
"$kl" ceilings > /dev/null 2> "$tmp/ceil"; rc=$?
if "$(dirname "$kl")/kl_gpu_guard" true > /dev/null; then ok "ceilings (GPU present: not checked here)"
else [ $rc -eq 1 ] && grep -q "no CUDA device" "$tmp/ceil" && ok "ceilings without a GPU: a clean refusal, exit 1" || bad "ceilings: rc=$rc $(cat "$tmp/ceil")"; fi

# kernlab story: every argument checked before the device (usage errors exit 2, nothing written);
# without a GPU a clean refusal, exit 1, and still nothing written.
for args in "--layers 0" "--layers 33" "--prompt 31" "--prompt x" "--shared 15" "--prompt 64 --shared 64" \
            "--steps 63" "--seed -1" "--bogus" "--layers 2 extra" "--steps"; do
  # shellcheck disable=SC2086
  "$kl" story --out "$tmp/story_usage" $args > /dev/null 2> "$tmp/story_err"; rc=$?
  [ $rc -eq 2 ] && [ ! -e "$tmp/story_usage" ] && grep -q "^kernlab story: " "$tmp/story_err" \
    && ok "story $args: a usage error, exit 2" || bad "story $args: rc=$rc $(cat "$tmp/story_err")"
done
"$kl" story --help | grep -q -- "--shared N" && ok "story --help documents its options" || bad "story --help"
if "$(dirname "$kl")/kl_gpu_guard" true > /dev/null; then ok "story without a GPU (GPU present: not checked here)"
else
  "$kl" story --tiny --out "$tmp/story_out" > /dev/null 2> "$tmp/story_err"; rc=$?
  [ $rc -eq 1 ] && [ ! -e "$tmp/story_out" ] && grep -q "^kernlab story: needs a CUDA device (" "$tmp/story_err" \
    && ok "story without a GPU: a clean refusal, exit 1, nothing written" || bad "story: rc=$rc $(cat "$tmp/story_err")"
fi

echo "$passes passed, $fails failed"
exit $((fails > 0))
