#!/usr/bin/env bash
# The committed guides must be what `kernlab report --results reports/data` writes today (lab/CONTRACTS.md
# section 8): byte for byte, but for the lines that describe a variant no results row measured
# (report_compare.py leaves those out, so adding a variant never requires regenerating the
# guides). Fails when kernels, the report code or reports/data changed and reports/ was not
# regenerated.
set -euo pipefail
kl=${1:?usage: reports_current.sh path/to/kernlab}
cd "$(dirname "$0")/../.."
# Results sit in reports/data/<module>.jsonl or, one folder per device, reports/data/<device>/<module>.jsonl.
[ -n "$(find reports/data -name '*.jsonl' 2>/dev/null | head -1)" ] || { echo "no reports/data yet"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$kl" report --results reports/data --out "$tmp" > /dev/null
if ! python3 lab/tests/report_compare.py reports "$tmp" --results reports/data; then
  echo "reports/ is stale: run build/kernlab report --results reports/data --out reports" >&2
  exit 1
fi
echo "reports/ matches reports/data"
