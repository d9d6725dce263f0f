// Node 18+: count events with fetch. Node's fetch keeps connections alive (its undici
// agent reuses them), so a busy server opens a handful of connections, not one per event.
// Fire-and-forget calls send no Idempotency-Key; exactlyOnce calls send one key, the same
// on every retry, so a retry after a lost answer is counted once.
import { randomUUID } from "node:crypto";

const base = process.env.SLOTTED_URL ?? "http://127.0.0.1:8080";

export async function count(recordType, recordId, { delta = 1, exactlyOnce = false, key } = {}) {
  const headers = { "Content-Type": "application/json", Prefer: "return=minimal" };
  if (exactlyOnce || key) headers["Idempotency-Key"] = key ?? randomUUID();
  const body = JSON.stringify({ record_type: recordType, record_id: String(recordId), delta });
  for (let attempt = 0; attempt < 4; attempt++) {
    let res;
    try {
      res = await fetch(`${base}/v1/increments`, {
        method: "POST", headers, body, signal: AbortSignal.timeout(1000),
      });
    } catch (err) {
      // A timeout or a lost connection: the daemon may have counted it. Retry only
      // with a key, which makes the retry safe.
      if (!headers["Idempotency-Key"]) throw err;
      continue;
    }
    await res.arrayBuffer(); // read the (empty) body so the connection is reused
    if (res.status === 204 || res.status === 202) return true;
    if (res.status !== 503) throw new Error(`slotted-counterd answered ${res.status}`);
    // 503: nothing was applied; wait as asked, then retry.
    const wait = Number(res.headers.get("Retry-After") ?? "1");
    await new Promise((r) => setTimeout(r, Math.min(wait, 5) * 1000));
  }
  throw new Error("slotted-counterd: no answer after 4 attempts");
}

// Run as a script: 100 page views of repository 42, then one purchase exactly once.
if (import.meta.url === `file://${process.argv[1]}`) {
  for (let i = 0; i < 100; i++) await count("repo_downloads", 42);
  await count("repo_downloads", 43, { exactlyOnce: true, key: "order-2001" });
  console.log("counted");
}
