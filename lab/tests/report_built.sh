#!/usr/bin/env bash
# `kernlab report` refuses to write guides from a binary built before the last edit of what they quote:
# a guide text (lab/<module>/guide/<section>.md) or a variant file's opening comment and kernel line.
# The binary's copies are checked against a scratch copy of those files (KL_REPORT_SOURCE_TREE), edited
# one way at a time: each edit that changes what a guide would say fails by the file's name with nothing
# written; an edit that changes nothing the guides quote still writes.
set -uo pipefail
kl=${1:?usage: report_built.sh path/to/kernlab}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
tree=$tmp/tree
fresh_tree() {
  rm -rf "$tree" && mkdir -p "$tree"
  cp --parents lab/*/guide/*.md kernels/*/v*.cu "$tree"/ && cp --parents kernels/*/v*.c "$tree"/ 2>/dev/null
  return 0
}
report() { # writes into a fresh --out; rc, stderr in $tmp/err
  rm -rf "$tmp/out"
  KL_REPORT_SOURCE_TREE=$tree "$kl" report --results lab/tests/report_fixture/data --out "$tmp/out" > /dev/null 2> "$tmp/err"
}
expect_refused() { # what, the line the refusal must name
  report; local rc=$?
  if [ $rc -eq 1 ] && grep -qF "$2" "$tmp/err" && grep -q 'rebuild it' "$tmp/err" && [ -z "$(ls -A "$tmp/out" 2>/dev/null)" ]; then
    ok "$1: refused, naming '$2', nothing written"
  else
    bad "$1: rc=$rc, out: $(ls "$tmp/out" 2>/dev/null | head -3 | tr '\n' ' '), stderr: $(head -5 "$tmp/err")"
  fi
}

fresh_tree
report && [ -s "$tmp/out/README.md" ] && ok "the tree as built: the guides are written" || bad "the tree as built: rc=$? $(head -5 "$tmp/err")"

fresh_tree
echo "A sentence added after the build." >> "$tree/lab/attention_decode/guide/analysis.md"
expect_refused "a guide text edited" "lab/attention_decode/guide/analysis.md: edited since the build"

fresh_tree
sed -i '1s/$/ (edited)/' "$tree/kernels/rmsnorm/v1_vec16.cu"
expect_refused "a variant's opening comment edited" "kernels/rmsnorm/v1_vec16.cu: its opening comment or kernel line"

fresh_tree
v=$(ls kernels/rope/v*.cu | head -1)
awk 'done == 0 && /^#include/ { print "/* a line that moves the kernel */"; done = 1 } { print }' "$v" > "$tree/$v"
expect_refused "a line added above the kernel" "$v: its opening comment or kernel line"

fresh_tree
rm "$tree/lab/index/guide/analysis.md"
expect_refused "a guide text removed" "lab/index/guide/analysis.md: no longer in the tree"

fresh_tree
echo "A section this binary has never seen." > "$tree/lab/rope/guide/newsection.md"
expect_refused "a guide text added" "lab/rope/guide/newsection.md: not in this build"

fresh_tree
cp "$v" "$tree/kernels/rope/v99_new_idea.cu"
expect_refused "a variant file added" "kernels/rope/v99_new_idea.cu: not in this build"

fresh_tree
# The body below the kernel line, which no guide quotes: a change there changes no guide.
last=$(wc -l < "$v")
sed -i "${last}s/\$/ \/\/ edited/" "$tree/$v"
report && ok "an edit the guides do not quote (a variant's last line): written" || bad "an edit below the kernel line refused: $(head -3 "$tmp/err")"

[ $fails -eq 0 ] || { echo "$fails failed"; exit 1; }
