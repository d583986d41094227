#!/usr/bin/env bash
# `kernlab` on allreduce as a user without enough GPUs meets it: the reference verifies every
# golden case, variants say SKIP with the reason, bench refuses clearly with a nonzero exit, and
# the hidden rank entry point is not a command. On a machine with enough GPUs the refusals are
# not checked (the multigpu tests cover that machine).
set -uo pipefail
kl=${1:?usage: cli.sh path/to/kernlab}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 passes=0
ok() { echo "ok   $*"; passes=$((passes + 1)); }
bad() { echo "FAIL $*" >&2; fails=$((fails + 1)); }
guard=$(dirname "$kl")/kl_gpu_guard

"$kl" list > "$tmp/list"
grep -q '^allreduce ' "$tmp/list" && grep -q 'allreduce/v0_nccl' "$tmp/list" && ! grep -q 'mutant' "$tmp/list" \
  && ok "list shows allreduce and its variants, no mutants" || bad "list: $(grep allreduce "$tmp/list")"

"$kl" verify --reference golden/allreduce > "$tmp/ref" 2>&1 && [ "$(grep -c '^PASS allreduce' "$tmp/ref")" -ge 6 ] \
  && ok "verify --reference passes every allreduce golden" || bad "verify --reference: $(cat "$tmp/ref")"

"$kl" verify golden/allreduce/rand_fp32_world8_n7 --variant v1_oneshot > "$tmp/v8" 2>&1; rc=$?
if "$guard" --min-gpus 8 true > /dev/null; then ok "verify at world 8 (8 GPUs here: not a refusal)"
else [ $rc -eq 77 ] && grep -q '^SKIP allreduce rand_fp32_world8_n7 v1_oneshot .*needs 8 GPUs' "$tmp/v8" \
  && tail -1 "$tmp/v8" | grep -q "nothing checked" \
  && ok "a world-8 case with fewer GPUs: one SKIP line with the reason, nothing checked (77)" || bad "verify world 8: rc=$rc $(cat "$tmp/v8")"; fi

if "$guard" --min-gpus 2 true > /dev/null; then
  ok "bench and check (2 GPUs here: not refusals)"
else
  "$kl" bench allreduce > "$tmp/bench" 2>&1; rc=$?
  [ $rc -ne 0 ] && grep -q 'needs at least 2 GPUs' "$tmp/bench" \
    && ok "bench with fewer than 2 GPUs says it needs two, exit $rc" || bad "bench: rc=$rc $(cat "$tmp/bench")"
  "$kl" check allreduce --variant v4_oneshot_one_barrier --seed 1 > "$tmp/check" 2>&1; rc=$?
  [ $rc -eq 77 ] && [ "$(grep -c '^SKIP allreduce' "$tmp/check")" -ge 40 ] && ! grep -q '^FAIL' "$tmp/check" \
    && tail -1 "$tmp/check" | grep -q "nothing checked" \
    && ok "check with fewer than 2 GPUs: every problem SKIPs with the reason, nothing checked (77)" || bad "check: rc=$rc $(head -5 "$tmp/check")"
fi

# A case whose params.world disagrees with its rows: one FAIL line naming the file.
mkdir -p "$tmp/case" && cp golden/allreduce/int_bf16_world2_n1/* "$tmp/case/"
sed -i 's/"world": 2/"world": 3/' "$tmp/case/meta.json"
"$kl" verify --reference "$tmp/case" > "$tmp/bad" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "^FAIL allreduce .*$tmp/case/x.npy: 2 rows, but params.world is 3" "$tmp/bad" \
  && ok "a case whose world disagrees with x fails cleanly" || bad "world mismatch: rc=$rc $(cat "$tmp/bad")"

"$kl" __kl_rank allreduce_batch > /dev/null 2> "$tmp/rank"; rc=$?
[ $rc -eq 2 ] && grep -q "how kernlab starts its own rank processes" "$tmp/rank" \
  && ok "the hidden rank entry refuses to run from a shell" || bad "__kl_rank: rc=$rc $(cat "$tmp/rank")"

echo "$passes passed, $fails failed"
exit $((fails > 0))
