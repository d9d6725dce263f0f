#!/bin/sh
# Batch with NDJSON: read repository ids, one per line (e.g. cut from an access log by a
# shipper or a cron job), and post them 1,000 to a request. Each request is applied
# whole or not at all; a failed one is reported and the script exits non-zero.
# SLOTTED_TOKEN, when set, is the daemon's bearer token.
#   cut -d' ' -f7 access.log | sed -n 's|^/downloads/\([0-9]*\)$|\1|p' | batch.sh
export url=${SLOTTED_URL:-http://127.0.0.1:8080}
export auth=${SLOTTED_TOKEN:+"Authorization: Bearer $SLOTTED_TOKEN"}
awk '{ printf "{\"record_type\": \"repo_downloads\", \"record_id\": %s}\n", $1 }' |
  split -l 1000 --filter='curl -sS --fail-with-body --max-time 10 -o /dev/null \
    -H "${auth:-Authorization:}" -H "Content-Type: application/x-ndjson" \
    -H "Prefer: return=minimal" --data-binary @- "$url/v1/increments"' -
