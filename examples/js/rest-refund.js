// Plain REST: submit, wait (unless policy decided at intake), verify, consume, act once, report.
//
//     REVIEWER_API_TOKEN=... node rest-refund.js --audience urn:agent:refunds-script
import { NotApproved, ToolDescription } from "@reviewer/gate";

import { Ledger, clientFrom, parseSettings } from "./common.js";

const REFUND = new ToolDescription({
  name: "payments.refund",
  summary: "Refund {currency} {amount} for order {order_id}",
  consequences: "Money goes back to the customer's card",
  currency: "EUR",
  reversible: false,
});

const settings = parseSettings("node rest-refund.js");
const client = clientFrom(settings);
const ledger = new Ledger(settings.ledger);
const fields = REFUND.requestFields("refund", { order_id: settings.order, amount: settings.amount }, {
  defaultPrincipal: { id: "requester", display: "Rita Requester" },
});
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
