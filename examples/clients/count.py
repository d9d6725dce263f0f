#!/usr/bin/env python3
# The usage shown in docs/clients.md, run by tests/docs/docs_test.py.
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "client"))
from slotted_client import SlottedClient, SlottedError

client = SlottedClient(os.environ.get("SLOTTED_URL", "http://127.0.0.1:8080"))   # one per process, shared by all threads

# A page view: fire-and-forget. No Idempotency-Key, a 1 s timeout; if the daemon is
# unreachable or slow the view is dropped (logged), never counted twice.
try:
    client.increment("repo_downloads", 42)
except SlottedError as e:
    print("not counted:", e)

# A purchase: a retry must not count twice. The key (here the order's id) goes with
# every retry; the daemon applies the request once, whichever instance a retry reaches.
client.post([{"record_type": "repo_downloads", "record_id": 43, "delta": 1}],
            idempotency_key="order-1002")
print("counted")
