// An agent calling the protected refund API (examples/protected_api/refund_api.py), the twin of
// examples/protected_api/agent.py:
//
//     REVIEWER_API_TOKEN=... node protected-refund.js --api-url http://127.0.0.1:8300 \
//         --client-id refund-bot --order 1182 --amount 740.00
//
// It calls the API as any client would, with one change: the `fetch` it calls with meets the API's
// transaction authorization challenge by relaying it to Reviewer, waits while people decide, and sends
// the request once more with Reviewer's token. Without it the API answers 401 and refunds nothing; with
// it, only the refund people approved runs, once.
import { parseArgs } from "node:util";

// reviewer: begin
import { TransactionAuthorizationError, transactionAuthorizedFetch } from "@reviewer/gate";
// reviewer: end

const { values: settings } = parseArgs({
  options: {
    "api-url": { type: "string", default: "http://127.0.0.1:8300" },
    "reviewer-url": { type: "string", default: process.env.REVIEWER_URL ?? "http://127.0.0.1:8000" },
    "client-id": { type: "string" },
    "api-key": { type: "string", default: "carol-key" },
    order: { type: "string", default: "1182" },
    amount: { type: "string", default: "740.00" },
  },
});
if (!settings["client-id"] || !process.env.REVIEWER_API_TOKEN) {
  console.error("usage: REVIEWER_API_TOKEN=... node protected-refund.js --client-id SLUG [--api-url URL] [--reviewer-url URL]");
  process.exit(2);
}

// reviewer: begin
const authorizedFetch = transactionAuthorizedFetch({
  reviewerUrl: settings["reviewer-url"],
  clientId: settings["client-id"],
  clientSecret: process.env.REVIEWER_API_TOKEN,
});
// reviewer: end
try {
  // reviewer: begin
  const answer = await authorizedFetch(`${settings["api-url"]}/refunds/${settings.order}`, {
    // reviewer: end
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Api-Key": settings["api-key"] },
    body: JSON.stringify({ amount: settings.amount, currency: "EUR" }),
  });
  console.log(answer.status, await answer.text());
  // reviewer: begin
} catch (error) {
  if (!(error instanceof TransactionAuthorizationError)) throw error;
  console.log(`not approved: ${error.message}`);
  process.exitCode = 1;
}
// reviewer: end
