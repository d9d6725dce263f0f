#!/usr/bin/env python3
"""A small slotted-counterd client (Python 3 standard library only).

    from slotted_client import SlottedClient
    client = SlottedClient("http://127.0.0.1:8125", token=None)
    client.increment("repo_downloads", 42)                  # one event
    client.post([{"record_type": 123, "record_id": 7, "delta": 2}])

Every POST carries an `Idempotency-Key` (a fresh random one per call unless you pass
your own), the same on every retry of that call, so a retry after an answer that was
lost (not refused) is applied once: the daemon answers it as the first time (with
`Idempotent-Replayed: true` when it knows it is a retry) and counts it once, also when
the retry reaches another instance sharing the database. That holds while retries
come within the daemon's `idempotency.window` (24h by default) of the first attempt.
Pass your own key (e.g. derived from your event's id) to make retries across process
restarts of the caller idempotent too.
Retries: on a connection error, a timeout, or a 502/503/504, with exponential
backoff and full jitter, honouring `Retry-After`; at most `attempts` tries, then
the last error is raised. A 4xx answer is never retried: the request is wrong, and
the daemon applied nothing of it.

Run as a script to post one increment:
    slotted_client.py http://127.0.0.1:8125 repo_downloads 42 [--delta N] [--token-file F]
"""

import argparse
import http.client
import json
import random
import secrets
import sys
import time
import urllib.parse

RETRYABLE_STATUS = {502, 503, 504}


class SlottedError(Exception):
    """The daemon refused the request (4xx) or it could not be delivered in time."""

    def __init__(self, message, status=None, body=None):
        super().__init__(message)
        self.status = status
        self.body = body


class SlottedClient:
    def __init__(self, base_url, token=None, timeout=2.0, attempts=6, backoff=0.1,
                 max_backoff=5.0, sleep=time.sleep):
        url = urllib.parse.urlsplit(base_url)
        if url.scheme != "http" or not url.hostname:
            raise ValueError(f"base_url must be http://host:port, not {base_url!r}")
        self.host = url.hostname
        self.port = url.port or 80
        self.token = token
        self.timeout = timeout
        self.attempts = attempts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.sleep = sleep
        self._conn = None

    def increment(self, record_type, record_id, delta=1, idempotency_key=None):
        """Counts one event; returns the number of increments the daemon accepted."""
        item = {"record_type": record_type, "record_id": str(record_id), "delta": delta}
        return self.post([item], idempotency_key)

    def post(self, items, idempotency_key=None):
        """Posts a list of increments as one atomic request; returns how many were
        accepted. The same key is sent on every retry of this call."""
        key = idempotency_key or secrets.token_hex(16)
        body = json.dumps(items).encode()
        headers = {"Content-Type": "application/json", "Idempotency-Key": key}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        last = None
        for attempt in range(self.attempts):
            retry_after = None
            try:
                status, payload, answer_headers = self._request(body, headers)
            except (OSError, http.client.HTTPException) as e:  # timeouts are OSErrors
                self._close()
                last = SlottedError(f"no answer from the daemon: {e}")
            else:
                if status in (200, 202):
                    return json.loads(payload).get("accepted", len(items))
                if status == 204:
                    return len(items)
                last = SlottedError(f"daemon answered {status}: {payload[:200]!r}", status, payload)
                if status not in RETRYABLE_STATUS:
                    raise last
                retry_after = _seconds(answer_headers.get("Retry-After"))
            if attempt + 1 == self.attempts:
                break
            wait = random.uniform(0, min(self.max_backoff, self.backoff * 2 ** attempt))
            if retry_after is not None:
                wait = max(wait, min(retry_after, self.max_backoff * 6))
            self.sleep(wait)
        raise last

    def close(self):
        self._close()

    def _request(self, body, headers):
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        self._conn.request("POST", "/v1/increments", body=body, headers=headers)
        r = self._conn.getresponse()
        payload = r.read()
        if r.will_close:
            self._close()
        return r.status, payload, r.headers

    def _close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _seconds(value):
    """Retry-After as delay-seconds; None when absent or an HTTP date (not sent by the daemon)."""
    try:
        return max(0.0, float(int(value)))
    except (TypeError, ValueError):
        return None


def main(argv=None):
    p = argparse.ArgumentParser(description="Post one increment to slotted-counterd.")
    p.add_argument("base_url")
    p.add_argument("record_type", help="a declared counter name or a number")
    p.add_argument("record_id")
    p.add_argument("--delta", type=int, default=1)
    p.add_argument("--token-file")
    p.add_argument("--idempotency-key")
    a = p.parse_args(argv)
    token = open(a.token_file).read().strip() if a.token_file else None
    record_type = int(a.record_type) if a.record_type.isdigit() else a.record_type
    client = SlottedClient(a.base_url, token=token)
    try:
        print(client.increment(record_type, a.record_id, a.delta, a.idempotency_key))
    except SlottedError as e:
        print(f"slotted_client: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
