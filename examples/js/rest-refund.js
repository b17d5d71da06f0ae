// Plain REST: submit, wait (unless policy decided at intake), verify, consume, act once, report.
//
//     REVIEWER_API_TOKEN=... node rest-refund.js --audience urn:agent:refunds-script
// reviewer: begin
import { NotApproved, ToolDescription } from "@reviewer/gate";
// reviewer: end

import { Ledger, clientFrom, parseSettings } from "./common.js";

// reviewer: begin
const REFUND = new ToolDescription({
  name: "payments.refund",
  summary: "Refund {currency} {amount} for order {order_id}",
  consequences: "Money goes back to the customer's card",
  currency: "EUR",
  reversible: false,
});
// reviewer: end

const settings = parseSettings("node rest-refund.js");
// reviewer: begin
const client = clientFrom(settings);
// reviewer: end
const ledger = new Ledger(settings.ledger);
// reviewer: begin
const fields = REFUND.requestFields("refund", { order_id: settings.order, amount: settings.amount }, {
  defaultPrincipal: { id: "requester", display: "Rita Requester" },
});
// reviewer: end
// reviewer: begin
try {
  const approval = await client.requestApproval(fields.action, { ...fields, timeoutSeconds: 3600 });
  const { order_id: orderId, amount } = approval.action.arguments; // a reviewer's edit, if there was one
  const transactionId = ledger.refund(orderId, amount, approval.idempotencyKey);
  await approval.report("succeeded", { transactionId });
  console.log(`refunded EUR ${amount} for order ${orderId}: ${transactionId}`);
} catch (error) {
  if (!(error instanceof NotApproved)) throw error;
  console.log(`not refunded (${error.code}): ${error.reason}`);
}
// reviewer: end
