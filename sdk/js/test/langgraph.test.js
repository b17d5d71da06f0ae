// The LangGraph.js adapter, driven without an LLM: a scripted "agent" node asks for one tool call, the
// fake Reviewer (testing.ts, which stands in for Reviewer's REST API) decides it, and the tests check
// the pause, what ran, with which arguments, and what Reviewer heard back.
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, it } from "node:test";

import { AIMessage } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import { END, MemorySaver, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
import { z } from "zod";

import { FileUsedStore, GatingRules, ReviewerClient, ToolDescription, currentApproval } from "@reviewer/gate";
import { ReviewedToolNode, pendingApprovals, resumeWithDecisions } from "@reviewer/gate/langgraph";
import { FakeReviewer, ReviewerKey, decideNextProposal } from "@reviewer/gate/testing";

const AUDIENCE = "urn:agent:langgraph";
const ARGUMENTS = { order_id: "1182", amount: "40.00" };
const DESCRIPTION = new ToolDescription({ name: "payments.refund", summary: "Refund {currency} {amount} for order {order_id}", currency: "EUR" });
const key = await ReviewerKey.create();
let reviewer;
let client;

beforeEach(async () => {
  reviewer = await new FakeReviewer([key]).start();
  client = new ReviewerClient({
    reviewerUrl: reviewer.url,
    apiToken: "agent-token",
    audience: AUDIENCE,
    usedStore: new FileUsedStore(mkdtempSync(join(tmpdir(), "reviewer-gate-langgraph-"))),
  });
});
afterEach(() => reviewer.stop());

function refundTool(ran) {
  return tool(
    async (input) => {
      ran.push({ input, key: currentApproval()?.idempotencyKey });
      return `refunded ${input.amount}`;
    },
    { name: "refund", description: "Refund an order.", schema: z.object({ order_id: z.string(), amount: z.string() }) },
  );
}

/** agent → tools → agent: the agent asks for one refund, then answers with what the tool said. */
function graphWith(node) {
  const agent = async (state) => {
    const last = state.messages.at(-1);
    if (last._getType() === "tool") return { messages: [new AIMessage(`done: ${last.content}`)] };
    return { messages: [new AIMessage({ content: "", tool_calls: [{ id: "call-1", name: "refund", args: ARGUMENTS }] })] };
  };
  return new StateGraph(MessagesAnnotation)
    .addNode("agent", agent)
    .addNode("tools", node.node())
    .addEdge(START, "agent")
    .addConditionalEdges("agent", (state) => (state.messages.at(-1).tool_calls?.length ? "tools" : END))
    .addEdge("tools", "agent")
    .compile({ checkpointer: new MemorySaver() });
}

const CONFIG = { configurable: { thread_id: "thread-9" } };

describe("LangGraph.js", () => {
  it("pauses on a gated call, then runs the tool once on Reviewer's approval, consumed", async () => {
    const ran = [];
    const node = new ReviewedToolNode([refundTool(ran)], client, { gated: ["refund"], descriptions: { refund: DESCRIPTION } });
    const graph = graphWith(node);
    const decided = decideNextProposal(reviewer, key, { audience: AUDIENCE }); // once the proposal arrives

    await graph.invoke({ messages: [{ role: "user", content: "Refund order 1182" }] }, CONFIG);
    const [pending] = await pendingApprovals(graph, CONFIG);
    assert.equal(pending.kind, "reviewer_approval");
    assert.equal(pending.summary, "Refund EUR 40.00 for order 1182");
    assert.deepEqual(ran, []); // nothing runs before the decision

    await decided;
    const state = await resumeWithDecisions(graph, CONFIG, client);

    assert.equal(state.messages.at(-1).content, "done: refunded 40.00");
    // The node re-runs on resume and submits again: the same task and request id, so the same proposal.
    const [submitted, resubmitted] = reviewer.proposals;
    assert.equal(reviewer.proposals.length, 2);
    assert.equal(resubmitted.body.task_id, submitted.body.task_id);
    assert.equal(resubmitted.body.request.request_id, submitted.body.request.request_id);
    assert.deepEqual(submitted.body.request.action, { tool: "payments.refund", arguments: ARGUMENTS, target: "order_id:1182" });
    assert.equal(submitted.body.context_id, "thread-9");
    assert.equal(ran.length, 1);
    assert.deepEqual(ran[0].input, ARGUMENTS);
    assert.equal(reviewer.consumesFor(ran[0].key).length, 1);
    assert.deepEqual(reviewer.outcomesFor(ran[0].key), ["succeeded"]);
    assert.deepEqual(await pendingApprovals(graph, CONFIG), []);
  });

  it("answers the model with the reviewer's reason and runs nothing on a rejection", async () => {
    const ran = [];
    const graph = graphWith(new ReviewedToolNode([refundTool(ran)], client, { gated: ["refund"], descriptions: { refund: DESCRIPTION } }));
    decideNextProposal(reviewer, key, { audience: AUDIENCE, decision: "rejected", reason: "no proof of loss", consume: false });
    await graph.invoke({ messages: [{ role: "user", content: "Refund order 1182" }] }, CONFIG);
    const state = await resumeWithDecisions(graph, CONFIG, client);
    assert.deepEqual(ran, []);
    assert.deepEqual(reviewer.consumes, []);
    assert.match(state.messages.at(-1).content, /Rejected by the reviewer: no proof of loss/);
  });

  it("refuses a forged resume value: the token must verify against the request the node built", async () => {
    const ran = [];
    const graph = graphWith(new ReviewedToolNode([refundTool(ran)], client, { gated: ["refund"], descriptions: { refund: DESCRIPTION } }));
    await graph.invoke({ messages: [{ role: "user", content: "Refund order 1182" }] }, CONFIG);
    const { Command } = await import("@langchain/langgraph");
    const snapshot = await graph.getState(CONFIG);
    const [interruption] = snapshot.tasks.flatMap((task) => task.interrupts);
    const state = await graph.invoke(new Command({ resume: { [interruption.id]: { token: "not.a.token" } } }), CONFIG);
    assert.deepEqual(ran, []);
    assert.match(state.messages.at(-1).content, /Not approved \(/);
  });

  it("runs an ungated tool at once, without Reviewer", async () => {
    const ran = [];
    const graph = graphWith(new ReviewedToolNode([refundTool(ran)], client, { open: ["ref*"] }));
    const state = await graph.invoke({ messages: [{ role: "user", content: "Refund order 1182" }] }, CONFIG);
    assert.equal(ran.length, 1);
    assert.deepEqual(reviewer.proposals, []);
    assert.equal(state.messages.at(-1).content, "done: refunded 40.00");
  });

  it("refuses descriptions of tools the node does not run", () => {
    assert.throws(() => new ReviewedToolNode([refundTool([])], client, { descriptions: { wire: DESCRIPTION } }), /does not run: wire/);
  });
});

describe("GatingRules", () => {
  it("reads shell-style patterns as Python's fnmatchcase does", () => {
    const rules = new GatingRules(["payments.*", "db_[!r]*"], ["payments.read?"], false);
    assert.equal(rules.isGated("payments.refund"), true);
    assert.equal(rules.isGated("payments.reads"), false);
    assert.equal(rules.isGated("db_write"), true);
    assert.equal(rules.isGated("db_read"), false);
    assert.equal(rules.isGated("Payments.refund"), false); // case-sensitive
    assert.equal(new GatingRules().isGated("delete_user"), true); // the risk hint
  });
});
