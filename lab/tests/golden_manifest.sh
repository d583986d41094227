#!/usr/bin/env bash
# golden/MANIFEST.sha256 must list every golden file with its hash: a changed, missing or
# unlisted file fails (regenerate with golden/gen/manifest.sh after a deliberate change).
set -euo pipefail
cd "$(dirname "$0")/../.."
sha256sum --quiet -c golden/MANIFEST.sha256
listed=$(awk '{print $2}' golden/MANIFEST.sha256 | sed 's/^\*//' | LC_ALL=C sort)
present=$(find golden -path golden/gen -prune -o -type f ! -name MANIFEST.sha256 -print | LC_ALL=C sort)
if [ "$listed" != "$present" ]; then
  echo "golden/MANIFEST.sha256 and golden/ disagree on which files exist:" >&2
  diff <(echo "$listed") <(echo "$present") >&2 || true
  exit 1
fi
echo "golden manifest: $(echo "$present" | wc -l) files match"
