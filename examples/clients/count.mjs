// Node 18+: count events with fetch. Node's fetch keeps connections alive (its undici
// agent reuses them), so a busy server opens a handful of connections, not one per event.
// Fire-and-forget calls send no Idempotency-Key and take at most 1 s; exactlyOnce calls
// send one key, the same on every retry (a retry after a lost answer is counted once),
// and take at most 5 s. Neither throws: each resolves to true (counted) or false.
import { randomUUID } from "node:crypto";

const base = process.env.SLOTTED_URL ?? "http://127.0.0.1:8080";
const token = process.env.SLOTTED_TOKEN; // when the daemon has http.auth_token_file

export async function count(recordType, recordId, { delta = 1, exactlyOnce = false, key } = {}) {
  const headers = { "Content-Type": "application/json", Prefer: "return=minimal" };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (exactlyOnce || key) headers["Idempotency-Key"] = key ?? randomUUID();
  const keyed = Boolean(headers["Idempotency-Key"]);
  const body = JSON.stringify({ record_type: recordType, record_id: String(recordId), delta });
  const ends = Date.now() + (keyed ? 5000 : 1000);
  for (let attempt = 0; ; attempt++) {
    let wait = Math.random() * Math.min(5000, 100 * 2 ** attempt);
    try {
      const res = await fetch(`${base}/v1/increments`, {
        method: "POST", headers, body, signal: AbortSignal.timeout(Math.max(1, ends - Date.now())),
      });
      await res.arrayBuffer(); // read the (empty) body so the connection is reused
      if (res.status === 204 || res.status === 202) return true;
      // A 4xx applied nothing and will be refused again; a 503 applied nothing either.
      if (res.status !== 503) {
        console.error(`slotted-counterd answered ${res.status}: not counted`);
        return false;
      }
      wait = Math.max(wait, Number(res.headers.get("Retry-After") ?? "1") * 1000);
      if (!keyed) break; // fire-and-forget: one attempt
    } catch (err) {
      // A timeout or a lost connection: the daemon may have counted it. Retry only
      // with a key, which makes the retry safe.
      if (!keyed) {
        console.error(`slotted-counterd: not counted: ${err.message}`);
        return false;
      }
    }
    if (Date.now() + wait >= ends) break; // no wait past the deadline, none after the last try
    await new Promise((r) => setTimeout(r, wait));
  }
  console.error("slotted-counterd: not counted before the deadline");
  return false;
}

// Run as a script: 100 page views of repository 42, then one purchase exactly once.
if (import.meta.url === `file://${process.argv[1]}`) {
  for (let i = 0; i < 100; i++) await count("repo_downloads", 42);
  const ok = await count("repo_downloads", 43, { exactlyOnce: true, key: "order-2001" });
  console.log(ok ? "counted" : "not counted yet, queue it");
}
