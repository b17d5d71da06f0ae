// OpenAI Agents SDK: the SDK's tool approval hook, decided by Reviewer.
//
//     REVIEWER_API_TOKEN=... node openai-agents-refund.js --audience urn:agent:openai-demo
//
// `scriptedModel` stands in for the model (so the example runs without network or an API key): it
// calls `refund` once and then repeats the tool's answer. Give the Agent `model: "gpt-..."` for a real one.
import { Agent, Usage, run, setTracingDisabled, tool } from "@openai/agents";
// reviewer: begin
import { ToolDescription, currentApproval } from "@reviewer/gate";
import { ReviewerApprovals } from "@reviewer/gate/openai-agents";
// reviewer: end
import { z } from "zod";

import { Ledger, clientFrom, parseSettings } from "./common.js";

// How the refund reads for the reviewers; the principal comes from the run's context when it names one.
// reviewer: begin description
const REFUND = new ToolDescription({
  name: "payments.refund",
  summary: "Refund {currency} {amount} for order {order_id}",
  consequences: "Money goes back to the customer's card",
  currency: "EUR",
  reversible: false,
  principal: (context) => context?.principal ?? { id: "requester", display: "Rita" },
});
// reviewer: end

function scriptedModel(orderId, amount) {
  return {
    async getResponse(request) {
      const outputs = request.input.filter((item) => item.type === "function_call_result");
      if (!outputs.length) {
        const call = { type: "function_call", callId: "call-refund", name: "refund", arguments: JSON.stringify({ order_id: orderId, amount }), status: "completed" };
        return { usage: new Usage(), output: [call] };
      }
      const text = outputs.at(-1).output.text ?? JSON.stringify(outputs.at(-1).output);
      return { usage: new Usage(), output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text }] }] };
    },
    async *getStreamedResponse() {
      throw new Error("the example does not stream");
    },
  };
}

setTracingDisabled(true);
const settings = parseSettings("node openai-agents-refund.js");
const ledger = new Ledger(settings.ledger);
// `run` is this example's own copy of the SDK's: the adapter drives the run with it.
// reviewer: begin
const approvals = new ReviewerApprovals(clientFrom(settings), { principal: { id: "requester", display: "Rita Requester" }, run });
// reviewer: end
const refund = tool({
  name: "refund",
  description: "Refund an order.",
  parameters: z.object({ order_id: z.string(), amount: z.string() }),
  execute: async ({ order_id: orderId, amount }) => {
    // reviewer: begin
    const transactionId = ledger.refund(orderId, amount, currentApproval().idempotencyKey);
    // reviewer: end
    return `refunded EUR ${amount} for order ${orderId}: ${transactionId}`;
  },
});
const agent = new Agent({
  name: "refunds",
  instructions: "Refund what you are asked to.",
  model: scriptedModel(settings.order, settings.amount),
  // reviewer: begin
  tools: [approvals.gate(refund, REFUND)],
  // reviewer: end
});
// reviewer: begin
const result = await approvals.run(agent, `Refund EUR ${settings.amount} for order ${settings.order}`);
// reviewer: end
console.log(result.finalOutput);
