// The adapters, driven without an LLM: a scripted model asks for one tool call, the fake Reviewer
// decides it, and the tests check what ran, with which arguments, and what Reviewer heard back.
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, it } from "node:test";

import { Agent, Usage, run, setTracingDisabled, tool as agentsTool } from "@openai/agents";
import { generateText, stepCountIs, tool as aiTool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";

import { FileUsedStore, ReviewerClient, ToolDescription, actionDigest, currentApproval } from "@reviewer/gate";
import { ReviewerToolApprovals } from "@reviewer/gate/ai-sdk";
import { ReviewerApprovals } from "@reviewer/gate/openai-agents";
import { FakeReviewer, ReviewerKey, decideNextProposal, decisionClaims } from "@reviewer/gate/testing";

setTracingDisabled(true);

const AUDIENCE = "urn:agent:adapters";
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
    usedStore: new FileUsedStore(mkdtempSync(join(tmpdir(), "reviewer-gate-adapters-"))),
  });
});
afterEach(() => reviewer.stop());

/** A reviewer who edits the amount: the decision names a new request that replaces the agent's. */
function editNextProposal(amount) {
  reviewer.onProposal = async (body, proposalId) => {
    reviewer.onProposal = null;
    const edited = { ...body.request.action, arguments: { ...body.request.action.arguments, amount } };
    const claims = decisionClaims({
      issuer: reviewer.url,
      audience: AUDIENCE,
      taskId: body.task_id,
      requestId: `${body.request.request_id}-edited`,
      actionDigest: actionDigest(edited),
      contextId: body.context_id,
      overrides: { replaces: [body.request.request_id], action: edited },
    });
    reviewer.decide(proposalId, await key.sign(claims));
  };
}

describe("OpenAI Agents SDK", () => {
  function scriptedAgent(tools) {
    const seen = [];
    let calls = 0;
    const model = {
      async getResponse(request) {
        calls += 1;
        if (calls === 1) {
          return {
            usage: new Usage(),
            output: [{ type: "function_call", callId: "call-1", name: "refund", arguments: JSON.stringify(ARGUMENTS), status: "completed" }],
          };
        }
        seen.push(request.input.at(-1));
        return { usage: new Usage(), output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "done" }] }] };
      },
      async *getStreamedResponse() {
        throw new Error("not streamed here");
      },
    };
    return { agent: new Agent({ name: "ops", model, tools }), seen };
  }

  function refundTool(ran) {
    return agentsTool({
      name: "refund",
      description: "Refund an order.",
      parameters: z.object({ order_id: z.string(), amount: z.string() }),
      execute: async (input) => {
        ran.push({ input, key: currentApproval()?.idempotencyKey });
        return `refunded ${input.amount}`;
      },
    });
  }

  it("runs the tool once on Reviewer's approval, consumed, and reports the outcome", async () => {
    const ran = [];
    const approvals = new ReviewerApprovals(client, { principal: { id: "u-7", display: "Casey" } });
    const { agent, seen } = scriptedAgent([approvals.gate(refundTool(ran), DESCRIPTION)]);
    decideNextProposal(reviewer, key, { audience: AUDIENCE });

    const result = await approvals.run(agent, "Refund order 1182");

    assert.equal(result.finalOutput, "done");
    const [submitted] = reviewer.proposals;
    assert.equal(submitted.body.task_id, "openai-agents-call-1");
    assert.deepEqual(submitted.body.request.action, { tool: "payments.refund", arguments: ARGUMENTS, target: "order_id:1182" });
    assert.equal(submitted.body.request.summary, "Refund EUR 40.00 for order 1182");
    assert.deepEqual(submitted.body.request.principal, { id: "u-7", display: "Casey" });
    assert.equal(ran.length, 1);
    assert.deepEqual(ran[0].input, ARGUMENTS);
    assert.equal(reviewer.consumesFor(ran[0].key).length, 1);
    assert.deepEqual(reviewer.outcomesFor(ran[0].key), ["succeeded"]);
    assert.equal(seen[0].output.text, "refunded 40.00");
  });

  it("runs a reviewer's edit, never the asked arguments", async () => {
    const ran = [];
    const approvals = new ReviewerApprovals(client);
    const { agent } = scriptedAgent([approvals.gate(refundTool(ran), DESCRIPTION)]);
    editNextProposal("25.00");
    await approvals.run(agent, "Refund order 1182");
    assert.deepEqual(ran.map(({ input }) => input), [{ ...ARGUMENTS, amount: "25.00" }]);
  });

  it("rejects the call with the reviewer's reason and runs nothing", async () => {
    const ran = [];
    const approvals = new ReviewerApprovals(client);
    const { agent, seen } = scriptedAgent([approvals.gate(refundTool(ran), DESCRIPTION)]);
    decideNextProposal(reviewer, key, { audience: AUDIENCE, decision: "rejected", reason: "no proof of loss", consume: false });
    await approvals.run(agent, "Refund order 1182");
    assert.deepEqual(ran, []);
    assert.deepEqual(reviewer.consumes, []);
    assert.match(seen[0].output.text, /Rejected by the reviewer: no proof of loss/);
  });

  it("runs nothing for a call approved by hand instead of by Reviewer", async () => {
    const ran = [];
    const approvals = new ReviewerApprovals(client);
    const { agent, seen } = scriptedAgent([approvals.gate(refundTool(ran), DESCRIPTION)]);
    const paused = await run(agent, "Refund order 1182");
    paused.state.approve(paused.interruptions[0]);
    await run(agent, paused.state);
    assert.deepEqual(ran, []);
    assert.match(seen[0].output.text, /not approved by Reviewer/);
    assert.deepEqual(reviewer.proposals, []);
  });
});

describe("AI SDK", () => {
  const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };

  function scriptedModel() {
    const seen = [];
    let calls = 0;
    const model = new MockLanguageModelV4({
      doGenerate: async (options) => {
        calls += 1;
        if (calls === 1) {
          return {
            content: [{ type: "tool-call", toolCallId: "call-1", toolName: "refund", input: JSON.stringify(ARGUMENTS) }],
            finishReason: { unified: "tool-calls", raw: undefined },
            usage,
            warnings: [],
          };
        }
        seen.push(options.prompt.at(-1));
        return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
      },
    });
    return { model, seen };
  }

  function refundTool(ran) {
    return aiTool({
      description: "Refund an order.",
      inputSchema: z.object({ order_id: z.string(), amount: z.string() }),
      execute: async (input) => {
        ran.push({ input, key: currentApproval()?.idempotencyKey });
        return { refunded: input.amount };
      },
    });
  }

  async function generate(approvals, tools, model) {
    return generateText({ model, prompt: "Refund order 1182", tools, toolApproval: approvals.toolApproval(), stopWhen: stepCountIs(3) });
  }

  it("runs the tool once on Reviewer's approval, consumed, and reports the outcome", async () => {
    const ran = [];
    const approvals = new ReviewerToolApprovals(client, { principal: { id: "u-7", display: "Casey" } });
    const tools = { refund: approvals.gate("refund", refundTool(ran), DESCRIPTION) };
    const { model, seen } = scriptedModel();
    decideNextProposal(reviewer, key, { audience: AUDIENCE });

    const result = await generate(approvals, tools, model);

    assert.equal(result.text, "done");
    const [submitted] = reviewer.proposals;
    assert.equal(submitted.body.task_id, "ai-sdk-call-1");
    assert.deepEqual(submitted.body.request.action, { tool: "payments.refund", arguments: ARGUMENTS, target: "order_id:1182" });
    assert.equal(ran.length, 1);
    assert.deepEqual(ran[0].input, ARGUMENTS);
    assert.equal(reviewer.consumesFor(ran[0].key).length, 1);
    assert.deepEqual(reviewer.outcomesFor(ran[0].key), ["succeeded"]);
    assert.deepEqual(seen[0].content[0].output, { type: "json", value: { refunded: "40.00" } });
  });

  it("runs a reviewer's edit, never the asked arguments", async () => {
    const ran = [];
    const approvals = new ReviewerToolApprovals(client);
    const tools = { refund: approvals.gate("refund", refundTool(ran), DESCRIPTION) };
    editNextProposal("25.00");
    await generate(approvals, tools, scriptedModel().model);
    assert.deepEqual(ran.map(({ input }) => input), [{ ...ARGUMENTS, amount: "25.00" }]);
  });

  it("denies the call with the reviewer's reason and runs nothing", async () => {
    const ran = [];
    const approvals = new ReviewerToolApprovals(client);
    const tools = { refund: approvals.gate("refund", refundTool(ran), DESCRIPTION) };
    const { model, seen } = scriptedModel();
    decideNextProposal(reviewer, key, { audience: AUDIENCE, decision: "rejected", reason: "no proof of loss", consume: false });
    await generate(approvals, tools, model);
    assert.deepEqual(ran, []);
    assert.deepEqual(reviewer.consumes, []);
    assert.equal(seen[0].content[0].output.type, "execution-denied");
    assert.match(seen[0].content[0].output.reason, /Rejected by the reviewer: no proof of loss/);
  });

  it("runs nothing for a call approved without Reviewer", async () => {
    const ran = [];
    const approvals = new ReviewerToolApprovals(client);
    const tools = { refund: approvals.gate("refund", refundTool(ran), DESCRIPTION) };
    const { model, seen } = scriptedModel();
    await generateText({ model, prompt: "Refund order 1182", tools, toolApproval: { refund: "approved" }, stopWhen: stepCountIs(3) });
    assert.deepEqual(ran, []);
    assert.match(JSON.stringify(seen[0].content[0].output), /not approved by Reviewer/);
    assert.deepEqual(reviewer.proposals, []);
  });

  it("refuses, when gating, a description naming an argument the tool does not take", () => {
    const approvals = new ReviewerToolApprovals(client);
    assert.throws(() => approvals.gate("refund", refundTool([]), new ToolDescription({ summary: "{invoice}" })), /summary: names invoice/);
  });
});
