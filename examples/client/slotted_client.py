#!/usr/bin/env python3
"""A small slotted-counterd client (Python 3 standard library only, thread-safe).

    from slotted_client import SlottedClient
    client = SlottedClient("http://127.0.0.1:8080", token=None)   # one per process
    client.increment("repo_downloads", 42)                  # fire-and-forget: a page view
    client.post([{"record_type": 123, "record_id": 7, "delta": 2}],
                exactly_once=True)                           # a retry must not count twice

Two kinds of call (docs/clients.md):

- Fire-and-forget (the default): no `Idempotency-Key`, so the daemon aggregates the
  increment in memory and writes no key row for it. It is retried only when the daemon
  certainly applied nothing: a 503 (honouring `Retry-After`) or a connection that could
  not be opened. A timeout or a connection lost after sending is not retried, since the
  daemon may have counted it; the call raises, and the event is lost or counted once,
  never twice.
- `exactly_once=True` (or your own `idempotency_key`): the request carries an
  `Idempotency-Key` (a fresh random one per call unless you pass yours, e.g. derived from
  your event's id, which also survives a restart of the caller), the same on every
  retry of that call, and is also retried after a timeout, a lost connection or a
  502/504: a retry after an answer that was lost is applied once, through any instance
  sharing the database, within the daemon's `idempotency.window` (24h by default).

Retries use exponential backoff with full jitter; at most `attempts` tries, then the
last error is raised. A 4xx answer is never retried: the daemon applied nothing of it
and will refuse it again. Each thread keeps its own keep-alive connection, so one
client may be shared by every thread of a web server; timeouts are short (1 s) so that
a page never waits long on a counter.

Run as a script to post one increment:
    slotted_client.py http://127.0.0.1:8080 repo_downloads 42 [--delta N] [--token-file F]
                      [--exactly-once | --idempotency-key KEY]
"""

import argparse
import http.client
import json
import random
import secrets
import sys
import threading
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
    def __init__(self, base_url, token=None, timeout=1.0, attempts=6, backoff=0.1,
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
        self._local = threading.local()  # one connection per thread

    def increment(self, record_type, record_id, delta=1, idempotency_key=None,
                  exactly_once=False):
        """Counts one event; returns the number of increments the daemon accepted."""
        item = {"record_type": record_type, "record_id": str(record_id), "delta": delta}
        return self.post([item], idempotency_key, exactly_once)

    def post(self, items, idempotency_key=None, exactly_once=False):
        """Posts a list of increments as one atomic request; returns how many were
        accepted. With exactly_once (or a key) the same key is sent on every retry."""
        keyed = exactly_once or idempotency_key is not None
        body = json.dumps(items).encode()
        headers = {"Content-Type": "application/json"}
        if keyed:
            headers["Idempotency-Key"] = idempotency_key or secrets.token_hex(16)
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        last = None
        for attempt in range(self.attempts):
            retry_after = None
            sent = False
            try:
                sent, status, payload, answer_headers = self._request(body, headers)
            except _NotSent as e:
                last = SlottedError(f"could not reach the daemon: {e.__cause__}")
            except (OSError, http.client.HTTPException) as e:  # timeouts are OSErrors
                self._close()
                last = SlottedError(f"no answer from the daemon: {e}")
                if not keyed:
                    raise last  # it may have been counted: a retry could count it twice
            else:
                if status in (200, 202):
                    return json.loads(payload).get("accepted", len(items))
                if status == 204:
                    return len(items)
                last = SlottedError(f"daemon answered {status}: {payload[:200]!r}", status, payload)
                # A 503 from the daemon applied nothing; a 502/504 comes from a proxy
                # and says nothing about whether the daemon counted it.
                if status != 503 and not (keyed and status in RETRYABLE_STATUS):
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
        """Closes this thread's connection."""
        self._close()

    def _request(self, body, headers):
        conn = getattr(self._local, "conn", None)
        reused = conn is not None
        if conn is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                conn.connect()
            except OSError as e:
                raise _NotSent() from e
            self._local.conn = conn
        try:
            conn.request("POST", "/v1/increments", body=body, headers=headers)
            r = conn.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
            # A kept-alive connection the daemon closed while idle (http.idle_timeout):
            # it answers every request it reads before closing, so closed without a
            # byte of answer means the request was never read.
            self._close()
            if reused:
                raise _NotSent() from e
            raise
        payload = r.read()
        if r.will_close:
            self._close()
        return True, r.status, payload, r.headers

    def _close(self):
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


class _NotSent(Exception):
    """The connection could not be opened: nothing reached the daemon."""


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
    p.add_argument("--exactly-once", action="store_true",
                   help="send an Idempotency-Key, so that a retry never counts twice")
    a = p.parse_args(argv)
    token = open(a.token_file).read().strip() if a.token_file else None
    record_type = int(a.record_type) if a.record_type.isdigit() else a.record_type
    client = SlottedClient(a.base_url, token=token)
    try:
        print(client.increment(record_type, a.record_id, a.delta, a.idempotency_key,
                               a.exactly_once))
    except SlottedError as e:
        print(f"slotted_client: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
