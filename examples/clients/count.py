#!/usr/bin/env python3
# The usage shown in docs/clients.md, run by tests/docs/docs_test.py.
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "client"))
from slotted_client import SlottedClient, SlottedError

# One per process, shared by all threads; SLOTTED_TOKEN when the daemon wants a token.
client = SlottedClient(os.environ.get("SLOTTED_URL", "http://127.0.0.1:8080"),
                       token=os.environ.get("SLOTTED_TOKEN"))

# A page view: fire-and-forget. No Idempotency-Key, at most 1 s; if the daemon is
# unreachable, busy (503) or slow, the view is dropped (logged), never counted twice,
# and nothing is raised into the page.
client.count("repo_downloads", 42)

# A purchase: a retry must not count twice. The key (here the order's id) goes with
# every retry; the daemon applies the request once, whichever instance a retry reaches.
# At most 5 s; then SlottedError, and the order is counted later (e.g. from a queue).
try:
    client.post([{"record_type": "repo_downloads", "record_id": 43, "delta": 1}],
                idempotency_key="order-1002")
    print("counted")
except SlottedError as e:
    print("not counted yet, queue it:", e)
