// What the TypeScript/JavaScript connect examples share: command-line settings and a ledger file standing
// in for payments (the Python examples' examples/connect/common.py).
import { appendFileSync, existsSync, readFileSync } from "node:fs";
import { parseArgs } from "node:util";

// reviewer: begin
import { ReviewerClient } from "@reviewer/gate";
// reviewer: end

export function parseSettings(usage) {
  const { values } = parseArgs({
    options: {
      "reviewer-url": { type: "string", default: process.env.REVIEWER_URL ?? "http://127.0.0.1:8000" },
      audience: { type: "string" },
      tenant: { type: "string" },
      "agent-slug": { type: "string" },
      ledger: { type: "string", default: "refunds.jsonl" },
      order: { type: "string", default: "1182" },
      amount: { type: "string", default: "40.00" },
    },
  });
  const apiToken = process.env.REVIEWER_API_TOKEN;
  if (!values.audience || !apiToken) {
    console.error(`usage: REVIEWER_API_TOKEN=... ${usage} --audience AUD [--reviewer-url URL] [--tenant T] [--agent-slug S]`);
    process.exit(2);
  }
  return { ...values, apiToken };
}

// reviewer: begin
export function clientFrom(settings) {
  return new ReviewerClient({
    reviewerUrl: settings["reviewer-url"],
    apiToken: settings.apiToken,
    audience: settings.audience,
    tenant: settings.tenant ?? null,
    agent: settings["agent-slug"] ?? null,
  });
}
// reviewer: end

/** The side effect: one JSON line per refund, keyed by the decision id (the idempotency key). */
export class Ledger {
  constructor(path) {
    this.path = path;
  }

  refund(orderId, amount, idempotencyKey) {
    const known = this.entries().find((entry) => entry.idempotency_key === idempotencyKey);
    if (known) return known.transaction_id; // a retry with the same key refunds nothing twice
    const transactionId = `tx-${idempotencyKey.slice(0, 8)}`;
    const entry = { order_id: orderId, amount, idempotency_key: idempotencyKey, transaction_id: transactionId, at: Date.now() / 1000 };
    appendFileSync(this.path, `${JSON.stringify(entry)}\n`);
    return transactionId;
  }

  entries() {
    if (!existsSync(this.path)) return [];
    return readFileSync(this.path, "utf8").split("\n").filter(Boolean).map((line) => JSON.parse(line));
  }
}
