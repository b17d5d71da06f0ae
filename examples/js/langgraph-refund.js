// LangGraph.js: a graph whose tool node asks Reviewer before a refund and pauses until people decide.
//
//     REVIEWER_API_TOKEN=... node langgraph-refund.js --audience urn:agent:langgraph-demo
//
// A scripted "agent" node stands in for the model (so the example runs without network or an API key):
// it calls `refund` once and then repeats the tool's answer. Put a chat model's node there for a real one.
import { AIMessage } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import { END, MemorySaver, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
// reviewer: begin
import { ToolDescription, currentApproval } from "@reviewer/gate";
import { ReviewedToolNode, pendingApprovals, resumeWithDecisions } from "@reviewer/gate/langgraph";
// reviewer: end
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

const settings = parseSettings("node langgraph-refund.js");
const ledger = new Ledger(settings.ledger);
// reviewer: begin
const client = clientFrom(settings);
// reviewer: end
const refund = tool(
  async ({ order_id: orderId, amount }) => {
    // reviewer: begin
    const transactionId = ledger.refund(orderId, amount, currentApproval().idempotencyKey);
    // reviewer: end
    return `refunded EUR ${amount} for order ${orderId}: ${transactionId}`;
  },
  { name: "refund", description: "Refund an order.", schema: z.object({ order_id: z.string(), amount: z.string() }) },
);
// reviewer: begin
const tools = new ReviewedToolNode([refund], client, {
  gated: ["refund"],
  descriptions: { refund: REFUND },
  principal: { id: "requester", display: "Rita Requester" },
});
// reviewer: end

function scriptedAgent(state) {
  const last = state.messages.at(-1);
  if (last._getType() === "tool") return { messages: [new AIMessage(String(last.content))] };
  const call = { id: "call-refund", name: "refund", args: { order_id: settings.order, amount: settings.amount } };
  return { messages: [new AIMessage({ content: "", tool_calls: [call] })] };
}

const graph = new StateGraph(MessagesAnnotation)
  .addNode("agent", scriptedAgent)
  .addNode("tools", tools.node())
  .addEdge(START, "agent")
  .addConditionalEdges("agent", (state) => (state.messages.at(-1).tool_calls?.length ? "tools" : END))
  .addEdge("tools", "agent")
  .compile({ checkpointer: new MemorySaver() }); // a persistent checkpointer survives a restart

const config = { configurable: { thread_id: `refund-${settings.order}` } };
let state = await graph.invoke({ messages: [{ role: "user", content: `Refund EUR ${settings.amount} for order ${settings.order}` }] }, config);
// reviewer: begin
while ((await pendingApprovals(graph, config)).length) {
  state = await resumeWithDecisions(graph, config, client); // waits for people, then resumes
}
// reviewer: end
console.log(state.messages.at(-1).content);
