#!/bin/sh
# Count one download of repository 42, then read the counter back.
# SLOTTED_URL defaults to the daemon's default address; SLOTTED_TOKEN, when set, is the
# daemon's bearer token ("Authorization:" alone sends no such header).
url=${SLOTTED_URL:-http://127.0.0.1:8080}
auth=${SLOTTED_TOKEN:+"Authorization: Bearer $SLOTTED_TOKEN"}

# Fire-and-forget: at most 1 s, no Idempotency-Key, no retry; the answer is a 204
# without a body (000 when the daemon could not be reached: the view is dropped).
curl -sS --max-time 1 -o /dev/null -w '%{http_code}\n' -H "${auth:-Authorization:}" \
  -H 'Content-Type: application/json' -H 'Prefer: return=minimal' \
  -d '{"record_type": "repo_downloads", "record_id": 42}' "$url/v1/increments"

# A purchase counted exactly once however often this line is retried: the key is the
# order's id, the same on every retry; retries (honouring Retry-After) stop after 5 s.
curl -sS --max-time 2 --retry 3 --retry-all-errors --retry-max-time 5 -H "${auth:-Authorization:}" \
  -H 'Content-Type: application/json' -H 'Idempotency-Key: order-1001' \
  -d '{"record_type": "repo_downloads", "record_id": 42, "delta": 1}' "$url/v1/increments"
echo

# Many events in one request: NDJSON, one object per line, applied whole or not at all.
printf '%s\n' '{"record_type": 123, "record_id": 42}' '{"record_type": 123, "record_id": 43, "delta": 5}' |
  curl -sS --max-time 2 -H "${auth:-Authorization:}" -H 'Content-Type: application/x-ndjson' \
    --data-binary @- "$url/v1/increments"
echo

# The total: what the database holds plus what this daemon still holds in memory.
curl -sS --max-time 2 -H "${auth:-Authorization:}" "$url/v1/counters/repo_downloads/42"
echo
