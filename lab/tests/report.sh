#!/usr/bin/env bash
# `kernlab report` on small committed results fixtures must write exactly the expected files,
# and the same inputs must give byte-identical output twice. Two fixtures: report_fixture (one
# device, the results format before a device dimension: it must keep loading; and a story.json,
# the synthetic run lab/story/test_story.c writes, for story.md and story-trace.json) and
# report_fixture_two_devices (the same module measured on two devices, one folder each, as
# reports/data/<device>/<module>.jsonl; made-up figures; one of b's rows carries a later commit
# and date, so environment.md must give b's file both commits and both dates). With --update,
# rewrites the expected files (after a deliberate change to the guides or to the rmsnorm sources
# they cite).
#
# Guides are compared by report_compare.py: byte for byte but for the lines that describe a
# variant no results row measured, so a learner's new variant never breaks this test. Then:
# such a variant changes nothing else (the report run as if it were not registered gives the same
# guides), a real change in a measured row is still caught, and a bad --results writes nothing.
#   report.sh path/to/kernlab [--update]
set -euo pipefail
kl=${1:?usage: report.sh path/to/kernlab [--update]}
cd "$(dirname "$0")/../.."
compare=lab/tests/report_compare.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Writes the guides of fixture $1 into $tmp/$1/a (and b, to check determinism); compares a with
# $1/expected, or replaces expected with --update.
regenerate() {
  local fixture=lab/tests/$1 out=$tmp/$1
  mkdir -p "$out"
  "$kl" report --results "$fixture/data" --out "$out/a" > /dev/null
  "$kl" report --results "$fixture/data" --out "$out/b" > /dev/null
  diff -r "$out/a" "$out/b" > /dev/null || { echo "$1: report is not deterministic:"; diff -r "$out/a" "$out/b" | head -20; exit 1; }
  if [ "$update" = 1 ]; then
    rm -rf "$fixture/expected" && cp -r "$out/a" "$fixture/expected" && echo "updated $fixture/expected"
    return
  fi
  # README.md lists every module this build registers, so it is checked for content, not bytes.
  if ! python3 "$compare" "$fixture/expected" "$out/a" --results "$fixture/data" --exclude README.md; then
    echo "$1: report output differs from $fixture/expected (rerun with --update if the change is intended)" >&2
    exit 1
  fi
  for f in rmsnorm.md README.md environment.md img/rmsnorm-roofline.svg; do [ -s "$out/a/$f" ] || { echo "$1: missing $f"; exit 1; }; done
  # The parts every guide must have.
  for section in "## What it computes" "## The variants" "## Execution story" "## Hardware analysis" "## Roofline" \
                 "## Against the targets and the peers" "## Correctness" "## Exercises" "## Reproduce"; do
    grep -q "^$section" "$out/a/rmsnorm.md" || { echo "$1: rmsnorm.md lacks '$section'"; exit 1; }
  done
  grep -q '^## Learning path' "$out/a/README.md" || { echo "$1: README.md lacks the learning path"; exit 1; }
}
update=0
[ "${2:-}" = "--update" ] && update=1
regenerate report_fixture
regenerate report_fixture_two_devices
[ "$update" = 1 ] && exit 0

one=$tmp/report_fixture/a two=$tmp/report_fixture_two_devices/a
# The story: its guide's sections, and the last step of the learning path (a link only where it was written).
for section in "## Timeline" "## Per-phase summaries" "## The transition: prefill -> decode" \
               "## Decode: time per step against the KV length" "## The radix hit" \
               "## Gaps between kernels, and what a CUDA graph saves" "## Every distinct kernel, profiled once" \
               "## The trace" "## How the story is checked" "## Reproduce"; do
  grep -q "^$section" "$one/story.md" || { echo "story.md lacks '$section'"; exit 1; }
done
grep -q '^Time 0.000 ms: request 1 arrives' "$one/story.md" || { echo "story.md: the timeline does not start with request 1"; exit 1; }
tail -3 "$one/README.md" | grep -q '^[0-9]*\. \[story\](story.md): ' || { echo "README.md: the story is not the last step"; exit 1; }
grep -q '^[0-9]*\. story: .*not generated yet' "$two/README.md" || { echo "README.md without story.json: no placeholder step"; exit 1; }
# The way in shows the gated variant (perf/targets names v3_pdl_residual_early), never the best
# measured in its place: the fixture did not measure it. Its targets on workloads the fixture has
# no row for (prefill-16k-add, decode-64-add) count too, as not measured.
grep -q '^| \[rmsnorm\](rmsnorm.md) | .* | 2 | v3_pdl_residual_early on prefill-16k: not measured | - | `v3_pdl_residual_early`: 0 of 4 targets met (decode-64 .* not measured; prefill-16k .* not measured; prefill-16k-add .* not measured; decode-64-add .* not measured) |' "$one/README.md" \
  || { echo "README.md lacks the rmsnorm row with its gated variant"; grep rmsnorm.md "$one/README.md"; exit 1; }
grep -q '^- rmsnorm `v3_pdl_residual_early` <!-- not measured: rmsnorm v3_pdl_residual_early -->' "$one/README.md" \
  || { echo "README.md does not list the unmeasured variants"; exit 1; }
# Two devices: the way in names each device's figure; the guide puts them side by side.
grep -q '^| \[rmsnorm\](rmsnorm.md) | .* | Fixture-A: v3_pdl_residual_early on prefill-16k: not measured; Fixture-B: v3_pdl_residual_early on prefill-16k: not measured | Fixture-A: -; Fixture-B: - | Fixture-A: `v3_pdl_residual_early`: 0 of 4' "$two/README.md" \
  || { echo "two devices: README.md lacks the rmsnorm row with a figure per device"; grep rmsnorm.md "$two/README.md"; exit 1; }
grep -q '^| workload | variant | Fixture-A us | .* | Fixture-B us | ' "$two/rmsnorm.md" \
  || { echo "two devices: the targets table has no column group per device"; exit 1; }
# Rows are told apart by device.name, not by the file they came from: the same rows in one file
# give the same guide but for the line that names the files.
mkdir -p "$tmp/flat"
cat lab/tests/report_fixture_two_devices/data/a/rmsnorm.jsonl lab/tests/report_fixture_two_devices/data/b/rmsnorm.jsonl \
  > "$tmp/flat/rmsnorm.jsonl"
"$kl" report --results "$tmp/flat" --out "$tmp/flat-out" > /dev/null
diff <(grep -v '^> Generated by\|reports/data/' "$two/rmsnorm.md") <(grep -v '^> Generated by\|reports/data/' "$tmp/flat-out/rmsnorm.md") \
  || { echo "two devices: one file of both devices' rows gives another guide than a folder per device"; exit 1; }
# A run appended to a file that already holds its rows' keys (a bench run of one variant brings its
# own peer rows): the file's earlier row is the one shown, and the repeats are noted once, with their
# count, not once a row.
mkdir -p "$tmp/appended"
{ cat lab/tests/report_fixture/data/rmsnorm.jsonl
  head -1 lab/tests/report_fixture/data/rmsnorm.jsonl | sed 's/"median":[0-9.]*/"median":999.0/'
  sed -n 2p lab/tests/report_fixture/data/rmsnorm.jsonl; } > "$tmp/appended/rmsnorm.jsonl"
"$kl" report --results "$tmp/appended" --out "$tmp/appended-out" > /dev/null 2> "$tmp/appended.err"
diff <(grep -v '^> Generated by' "$one/rmsnorm.md") <(grep -v '^> Generated by' "$tmp/appended-out/rmsnorm.md") \
  || { echo "a run appended to a file replaced rows the file held first"; exit 1; }
grep -qx 'kernlab report: reports/data/rmsnorm.jsonl: 2 rows repeat the variant, workload and device of an earlier row of the file (runs appended to it): the earlier rows are the ones shown' "$tmp/appended.err" \
  && [ "$(wc -l < "$tmp/appended.err")" = 1 ] \
  || { echo "the repeats within one file are not noted once with their count:"; cat "$tmp/appended.err"; exit 1; }
# A warp-specialized variant's trace of one CTA (made-up cycles): the table and the averages it implies.
"$kl" report --results lab/tests/report_fixture_timeline --out "$tmp/timeline" > /dev/null
g=$tmp/timeline/attention_prefill.md
grep -q "^One CTA's producer and consumers, key tile by key tile (CTA 0: the longest work tile, 3 key tiles" "$g" \
  || { echo "timeline: the guide does not introduce CTA 0's trace"; exit 1; }
grep -q '^    1     1100 |     1200     1400     1700     1900 |     1500     1700     2000     2200$' "$g" \
  || { echo "timeline: tile 1's row is wrong"; grep -A5 "^ tile" "$g"; exit 1; }
grep -q '200 cycles from K ready to S done, 300 in the softmax, 200 from the softmax.s end to its P V done, one tile every 1000 cycles; K was taken 100 cycles after the producer had issued the tile.s V. The softmax takes as long as the product' "$g" \
  || { echo "timeline: the averages or their reading are wrong"; grep "Per key tile" "$g"; exit 1; }
# The trace goes on into CTA 0's second work tile (next_tiles 2): its rows follow a line for the boundary,
# the averages above stay the first work tile's, and the boundary is read from warpgroup 0's marks (its last
# P V done 2900, rows stored 3000, next tile taken up 3400, first K 3900, first S 4100; one tile every 1000).
grep -q '^  -- rows stored at 3000 | 3300; the second work tile taken up at 3400 | 3700 --$' "$g" \
  && grep -A1 '^  -- rows stored' "$g" | grep -q '^    3     3050 |     3900     4100     4400     4600 |     4200' \
  || { echo "timeline: the second work tile's rows do not follow the boundary line"; grep -A8 "^ tile" "$g"; exit 1; }
grep -q "^Between the two work tiles, warpgroup 0 took 1200 cycles from its last P V done to the next tile's first S done, 1.2 key-tile periods: 100 to store its rows, 400 to take the next tile up, 500 to its Q and first K, 200 to its first S.$" "$g" \
  || { echo "timeline: the boundary's cost is misread"; grep "^Between" "$g"; exit 1; }
grep -q 'after setmaxnreg: the producer warpgroup 72 registers/thread, each consumer warpgroup 216' "$g" \
  || { echo "timeline: the story does not give the traced variant's register split after setmaxnreg"; exit 1; }
grep -q 'barrier .*<- waiting at a barrier, not a per-tile __syncthreads (this kernel has none in its loop)' "$g" \
  || { echo "timeline: a warp-specialized variant's barrier stall is read as a per-tile __syncthreads"; exit 1; }
# The way in judges the gated variant (v17_sum_check) and names its miss, marked as throttled (the row is).
# causal-8k has two targets (tc_frac and the time against the peer, which this fixture has no row for);
# the targets of the workloads the fixture has no row for at all count too, each not measured.
grep -q '^| \[attention_prefill\](attention_prefill.md) | .* | `v17_sum_check`: 0 of 8 targets met (causal-8k tc_frac 0.366 >= 0.78: \*\*miss\*\* (throttled); causal-8k time_vs_peer - <= 0.95: not measured (throttled); noncausal-4k tc_frac - >= 0.80: not measured; .*; causal-8k-p1 time_vs:causal-8k - <= 1.11: not measured) |$' \
  "$tmp/timeline/README.md" || { echo "README.md: the gate does not name the gated variant's miss"; grep attention_prefill.md "$tmp/timeline/README.md"; exit 1; }
# Each row says how it was timed and which re-check its timed launches got (the Fixture-B rows carry
# the bench's recheck object; rows without one say "not recorded"), and a throttled median is marked.
grep -q '^| v1_vec16 | decode-64 | Fixture-B | [^|]* | graph | .* | graph replay, whole output |$' "$two/rmsnorm.md" \
  && grep -q '^| v1_vec16 | prefill-16k | Fixture-B | 51.00 (49.98-53.55) (throttled) | events | .* | events replay, 4096 of 16384 sampled |$' "$two/rmsnorm.md" \
  && grep -q '^- made-up: the first and the last row of every block of 256$' "$two/rmsnorm.md" \
  && grep -q '^| v0_naive | decode-64 | Fixture-A | [^|]* | graph | .* | not recorded |$' "$two/rmsnorm.md" \
  || { echo "two devices: the timing, re-check or throttle of a row is not said"; grep '^| v' "$two/rmsnorm.md" | head -12; exit 1; }

# A variant nobody measured changes nothing but its marked lines: the guides of the build without
# v3_pdl_residual_early (the tree before a learner added it; the fixture has no row of it) equal
# those with it, once report_compare.py leaves the marked lines out; and they do not equal them
# byte for byte, so the variant is in the guides.
KL_REPORT_HIDE_VARIANTS=rmsnorm/v3_pdl_residual_early "$kl" report --results lab/tests/report_fixture/data \
  --out "$tmp/without" > /dev/null
grep -q '^### v3_pdl_residual_early\|^| v3_pdl_residual_early |' "$tmp/without/rmsnorm.md" && { echo "KL_REPORT_HIDE_VARIANTS did not hide the variant"; exit 1; }
cmp -s "$tmp/without/rmsnorm.md" "$one/rmsnorm.md" && { echo "the unmeasured variant is not in rmsnorm.md"; exit 1; }
python3 "$compare" "$tmp/without" "$one" --results lab/tests/report_fixture/data \
  || { echo "an unmeasured variant changed lines it did not mark"; exit 1; }
# ... while a real change in a measured row is still a difference, and a marker on a measured
# variant is refused (it would hide that variant's lines from the comparison).
cp -r "$one" "$tmp/changed"
sed -i 's/^| v1_vec16 | prefill-16k | \([0-9.]*\) /| v1_vec16 | prefill-16k | 1\1 /' "$tmp/changed/rmsnorm.md"
cmp -s "$tmp/changed/rmsnorm.md" "$one/rmsnorm.md" && { echo "the planted change did not apply"; exit 1; }
python3 "$compare" "$one" "$tmp/changed" > /dev/null && { echo "report_compare.py let a changed measured row through"; exit 1; }
cp -r "$one" "$tmp/marked"
sed -i '/^| v1_vec16 | prefill-16k | /s/$/ <!-- not measured: rmsnorm v1_vec16 -->/' "$tmp/marked/rmsnorm.md"
python3 "$compare" "$one" "$tmp/marked" --results lab/tests/report_fixture/data > "$tmp/marked.out" \
  && { echo "report_compare.py let a marker on a measured variant through"; exit 1; }
grep -q 'marks rmsnorm v1_vec16 as not measured, but the results measured it' "$tmp/marked.out" \
  || { echo "report_compare.py did not say which marker is wrong: $(cat "$tmp/marked.out")"; exit 1; }

# Inputs are checked before anything is written, and output lands all at once: a mistyped
# --results (a usage error), a folder without results, or a bad story.json leave --out byte for
# byte as it was, with no staging folder left behind.
cp -r "$one" "$tmp/kept"
sum() { (cd "$1" && find . -type f | sort | xargs sha256sum); }
before=$(sum "$tmp/kept")
set +e
"$kl" report --results lab/tests/report_fixture/dta --out "$tmp/kept" > /dev/null 2> "$tmp/err"; rc=$?
set -e
[ $rc -eq 2 ] && grep -q -- '--results lab/tests/report_fixture/dta' "$tmp/err" || { echo "a missing --results: rc=$rc $(cat "$tmp/err")"; exit 1; }
mkdir -p "$tmp/empty" "$tmp/badstory"
echo '{"format": "not a story"}' > "$tmp/badstory/story.json"
for bad in "$tmp/empty" "$tmp/badstory"; do
  set +e
  "$kl" report --results "$bad" --out "$tmp/kept" > /dev/null 2> "$tmp/err"; rc=$?
  set -e
  [ $rc -eq 1 ] || { echo "report --results $bad: rc=$rc, expected 1: $(cat "$tmp/err")"; exit 1; }
done
[ "$(sum "$tmp/kept")" = "$before" ] && [ -z "$(find "$tmp/kept" -name '.report-*')" ] \
  || { echo "a failed report changed --out:"; diff <(echo "$before") <(sum "$tmp/kept"); exit 1; }
echo "report: both fixtures regenerated (unmeasured lines aside, byte for byte); an unmeasured variant changes only its marked lines; bad inputs write nothing"
