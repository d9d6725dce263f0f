#!/usr/bin/env python3
"""A small slotted-counterd client (Python 3 standard library only, thread-safe).

    from slotted_client import SlottedClient
    client = SlottedClient("http://127.0.0.1:8080", token=None)   # one per process
    client.count("repo_downloads", 42)     # a page view: at most 1 s, never raises
    client.post([{"record_type": 123, "record_id": 7, "delta": 2}],
                exactly_once=True)          # a retry must not count twice; at most 5 s

Two kinds of call (docs/clients.md):

- Fire-and-forget (the default): no `Idempotency-Key`, so the daemon aggregates the
  increment in memory and writes no key row for it. One attempt, never retried: after a
  503 or a refused connection nothing was counted, after a timeout or a lost connection
  the daemon may have counted it; either way the event is lost or counted once, never
  twice, and the page does not wait.
- `exactly_once=True` (or your own `idempotency_key`): the request carries an
  `Idempotency-Key` (a fresh random one per call unless you pass yours, e.g. derived from
  your event's id, which also survives a restart of the caller), the same on every
  retry of that call, and is also retried after a timeout, a lost connection or a
  502/504: a retry after an answer that was lost is applied once, through any instance
  sharing the database, within the daemon's `idempotency.window` (24h by default).

Every call has a deadline and blocks its caller no longer: without a key (`count()`,
and `increment()` or `post()` without one) one attempt within `timeout` (1 s), no
retry; with a key, attempts within `deadline` (5 s), each given what is left of it,
with exponential backoff and full jitter, honouring `Retry-After` only while the wait
fits before the deadline (a 503 asking for 5 s ends the call at once), and no wait
after the last attempt. `count()` never
raises (it logs and returns False); `increment()` and `post()` raise SlottedError once
the deadline or `attempts` is reached. A 4xx answer is never retried: the daemon applied
nothing of it and will refuse it again. `token` (or `--token-file`) sends
`Authorization: Bearer`. Each thread keeps its own keep-alive connection, so one client
may be shared by every thread of a web server.

Run as a script to post one increment:
    slotted_client.py http://127.0.0.1:8080 repo_downloads 42 [--delta N] [--token-file F]
                      [--exactly-once | --idempotency-key KEY]
"""

import argparse
import http.client
import json
import logging
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
    def __init__(self, base_url, token=None, timeout=1.0, deadline=5.0, attempts=6, backoff=0.1,
                 max_backoff=5.0, sleep=time.sleep, clock=time.monotonic):
        url = urllib.parse.urlsplit(base_url)
        if url.scheme != "http" or not url.hostname:
            raise ValueError(f"base_url must be http://host:port, not {base_url!r}")
        self.host = url.hostname
        self.port = url.port or 80
        self.token = token
        self.timeout = timeout
        self.deadline = deadline
        self.clock = clock
        self.attempts = attempts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.sleep = sleep
        self._local = threading.local()  # one connection per thread

    def count(self, record_type, record_id, delta=1):
        """A page view: fire-and-forget within `timeout`; True when counted. Never raises:
        a failure is logged and the event dropped (counted once or not at all)."""
        try:
            return self.increment(record_type, record_id, delta) == 1
        except (SlottedError, ValueError) as e:
            logging.getLogger("slotted_client").warning("increment not counted: %s", e)
            return False

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
        ends = self.clock() + (self.deadline if keyed else self.timeout)
        # Without a key, one attempt: a page must not wait for a counter's retries.
        for attempt in range(self.attempts if keyed else 1):
            retry_after = None
            sent = False
            try:
                sent, status, payload, answer_headers = self._request(body, headers, ends)
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
                if not keyed or status not in RETRYABLE_STATUS:
                    raise last
                retry_after = _seconds(answer_headers.get("Retry-After"))
            if attempt + 1 == self.attempts or not keyed:
                break
            wait = random.uniform(0, min(self.max_backoff, self.backoff * 2 ** attempt))
            if retry_after is not None:
                wait = max(wait, retry_after)
            if self.clock() + wait >= ends:
                break  # the wait would pass the deadline: give up now, not after it
            self.sleep(wait)
        raise last

    def close(self):
        """Closes this thread's connection."""
        self._close()

    def _request(self, body, headers, ends):
        """One attempt, within min(timeout, what is left before `ends`) for the connect
        and again for the answer."""
        left = min(self.timeout, ends - self.clock())
        if left <= 0:
            raise _NotSent() from TimeoutError("the call's deadline passed")
        conn = getattr(self._local, "conn", None)
        reused = conn is not None
        if conn is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=left)
            try:
                conn.connect()
            except OSError as e:
                raise _NotSent() from e
            self._local.conn = conn
        if conn.sock is not None:
            conn.sock.settimeout(max(0.001, min(self.timeout, ends - self.clock())))
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
