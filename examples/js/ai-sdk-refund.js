// Vercel AI SDK: generateText's tool approval, decided by Reviewer.
//
//     REVIEWER_API_TOKEN=... node ai-sdk-refund.js --audience urn:agent:ai-sdk-demo
//
// A scripted model from `ai/test` stands in for the model (so the example runs without network or an
// API key): it calls `refund` once and then repeats the tool's answer. Pass a provider's model for a real one.
// reviewer: begin
import { ToolDescription, currentApproval } from "@reviewer/gate";
import { ReviewerToolApprovals } from "@reviewer/gate/ai-sdk";
// reviewer: end
import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";

import { Ledger, clientFrom, parseSettings } from "./common.js";

// reviewer: begin description
const REFUND = new ToolDescription({
  name: "payments.refund",
  summary: "Refund {currency} {amount} for order {order_id}",
  consequences: "Money goes back to the customer's card",
  currency: "EUR",
  reversible: false,
});
// reviewer: end

const usage = { inputTokens: { total: 0, noCache: 0, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 0, text: 0, reasoning: 0 } };

function scriptedModel(orderId, amount) {
  return new MockLanguageModelV4({
    doGenerate: async ({ prompt }) => {
      const last = prompt.at(-1);
      if (last.role !== "tool") {
        const call = { type: "tool-call", toolCallId: "call-refund", toolName: "refund", input: JSON.stringify({ order_id: orderId, amount }) };
        return { content: [call], finishReason: { unified: "tool-calls", raw: undefined }, usage, warnings: [] };
      }
      const { output } = last.content[0];
      const text =
        output.type === "execution-denied" ? output.reason : typeof output.value === "string" ? output.value : JSON.stringify(output.value);
      return { content: [{ type: "text", text }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
    },
  });
}

const settings = parseSettings("node ai-sdk-refund.js");
const ledger = new Ledger(settings.ledger);
// reviewer: begin
const approvals = new ReviewerToolApprovals(clientFrom(settings), { principal: { id: "requester", display: "Rita Requester" } });
// reviewer: end
const tools = {
  // reviewer: begin
  refund: approvals.gate(
    "refund",
  // reviewer: end
    tool({
      description: "Refund an order.",
      inputSchema: z.object({ order_id: z.string(), amount: z.string() }),
      execute: async ({ order_id: orderId, amount }) => {
        // reviewer: begin
        const transactionId = ledger.refund(orderId, amount, currentApproval().idempotencyKey);
        // reviewer: end
        return `refunded EUR ${amount} for order ${orderId}: ${transactionId}`;
      },
    }),
    // reviewer: begin
    REFUND,
  ),
    // reviewer: end
};
const result = await generateText({
  model: scriptedModel(settings.order, settings.amount),
  prompt: `Refund EUR ${settings.amount} for order ${settings.order}`,
  tools,
  // reviewer: begin
  toolApproval: approvals.toolApproval(),
  // reviewer: end
  stopWhen: stepCountIs(3),
});
console.log(result.text);
