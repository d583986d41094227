#!/usr/bin/env bash
# Rewrites golden/MANIFEST.sha256: one line per golden file (not the generators), repo-relative.
set -euo pipefail
cd "$(dirname "$0")/../.."
find golden -path golden/gen -prune -o -type f ! -name MANIFEST.sha256 -print | LC_ALL=C sort | xargs sha256sum > golden/MANIFEST.sha256
echo "golden/MANIFEST.sha256: $(wc -l < golden/MANIFEST.sha256) files"
