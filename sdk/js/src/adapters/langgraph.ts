/**
 * Reviewer in a LangGraph.js graph (`@reviewer/gate/langgraph`; the Python package's
 * reviewer_gate.langgraph): a tool node that turns gated tool calls into proposals and pauses the graph
 * with `interrupt()` until the signed decision arrives.
 *
 *     const tools = new ReviewedToolNode([refund, lookupOrder], client, {
 *       gated: ["refund"],
 *       descriptions: { refund: new ToolDescription({ name: "payments.refund", currency: "EUR" }) },
 *     });
 *     builder.addNode("tools", tools.node());            // where a ToolNode would go
 *     const graph = builder.compile({ checkpointer });    // interrupts need a checkpointer
 *
 *     let state = await graph.invoke(inputs, config);     // pauses on a gated call
 *     while ((await pendingApprovals(graph, config)).length) {
 *       state = await resumeWithDecisions(graph, config, client); // long-polls Reviewer, then resumes
 *     }
 *
 * For each tool call of the last AI message, the node runs an ungated tool at once; for a gated one it
 * submits the call as a proposal (described by the tool's ToolDescription) and calls `interrupt()` with
 * the proposal's id. When policy decided at intake (allowed or denied) the intake answer carries the
 * decision and the node does not interrupt. The graph resumes with the decision token
 * (`new Command({ resume })`, what `resumeWithDecisions` sends); the node then verifies it with the gate
 * against the request IT built (the resume value is only a carrier: a forged or replayed token is
 * refused), consumes it, runs the tool once with the approved arguments (a reviewer's edit when there
 * was one; inside the tool `currentApproval()?.idempotencyKey` is the key to send downstream) and
 * reports the outcome. A rejection, an expiry or any refusal becomes the tool's message instead: the
 * model reads why.
 *
 * On resume LangGraph re-runs the node from its start, so the request is deterministic (its ids derive
 * from the thread id and the tool call id, it carries no expiry) and submitting it again answers the
 * same proposal.
 */
import { createHash } from "node:crypto";

import { AIMessage, ToolMessage, type BaseMessage } from "@langchain/core/messages";
import type { RunnableConfig } from "@langchain/core/runnables";
import type { StructuredToolInterface } from "@langchain/core/tools";
import { Command, interrupt } from "@langchain/langgraph";

import { buildRequest, runningUnder, type Approval } from "../approval.js";
import type { ReviewerClient } from "../client.js";
import type { JsonObject } from "../decision.js";
import { ToolDescription, type Principal } from "../describe.js";
import { NotApproved } from "../errors.js";
import { GatingRules, riskHint } from "../risk.js";

/** The `kind` of this adapter's interrupt values (the same as the Python adapter's). */
export const INTERRUPT_KIND = "reviewer_approval";

export interface ReviewedToolNodeOptions {
  /** Tools that always ask Reviewer (shell-style patterns, as in the Python adapter). */
  gated?: Iterable<string>;
  /** Tools that never ask, even when their name sounds risky (patterns). */
  open?: Iterable<string>;
  /** Gate the tools whose names sound risky (refund, delete, ...), as the other adapters do. */
  useRiskHint?: boolean;
  /** Who the graph acts for when a description names no `principal` function. */
  principal?: Principal;
  agentVersion?: string;
  /** How each gated tool's calls read for the reviewers, checked now against its schema. */
  descriptions?: Record<string, ToolDescription>;
}

export interface ApprovalInterrupt {
  kind: typeof INTERRUPT_KIND;
  proposal_id: string;
  tool_call_id: string;
  summary: string;
  action: JsonObject;
}

type ToolCall = { id?: string; name: string; args: Record<string, unknown> };
type MessagesState = { messages: BaseMessage[] };

function argumentNames(tool: StructuredToolInterface): string[] {
  const schema = tool.schema as { shape?: object; properties?: object } | undefined;
  if (schema?.shape && typeof schema.shape === "object") return Object.keys(schema.shape);
  if (schema?.properties && typeof schema.properties === "object") return Object.keys(schema.properties);
  return [];
}

/** A short deterministic id: the same thread and tool call give the same request on every re-run. */
function requestKey(thread: string, callId: string): string {
  return createHash("sha256").update(`${thread}/${callId}`).digest("hex").slice(0, 32);
}

export class ReviewedToolNode {
  readonly client: ReviewerClient;
  readonly principal: Principal;
  readonly agentVersion: string;
  private readonly tools: Map<string, StructuredToolInterface>;
  private readonly rules: GatingRules;
  private readonly descriptions: Map<string, ToolDescription>;

  constructor(tools: StructuredToolInterface[], client: ReviewerClient, options: ReviewedToolNodeOptions = {}) {
    this.tools = new Map(tools.map((tool) => [tool.name, tool]));
    this.client = client;
    this.rules = new GatingRules(options.gated, options.open, options.useRiskHint ?? true);
    this.principal = options.principal ?? { id: "langgraph", display: "LangGraph graph" };
    this.agentVersion = options.agentVersion ?? "langgraph-js";
    const descriptions = Object.entries(options.descriptions ?? {});
    const unknown = descriptions.map(([name]) => name).filter((name) => !this.tools.has(name));
    if (unknown.length) throw new Error(`descriptions name tools this node does not run: ${unknown.sort().join(", ")}`);
    for (const [name, description] of descriptions) {
      description.checked(name, argumentNames(this.tools.get(name) as StructuredToolInterface)); // fails now, not at a call
    }
    this.descriptions = new Map(descriptions);
  }

  /** The node function to give `addNode`. */
  node(): (state: MessagesState, config: RunnableConfig) => Promise<{ messages: ToolMessage[] }> {
    return (state, config) => this.invoke(state, config);
  }

  async invoke(state: MessagesState, config: RunnableConfig): Promise<{ messages: ToolMessage[] }> {
    const last = state.messages.at(-1);
    const calls = (last instanceof AIMessage ? (last.tool_calls ?? []) : []) as ToolCall[];
    const thread = String((config.configurable as { thread_id?: unknown } | undefined)?.thread_id ?? "no-thread");
    const messages: ToolMessage[] = [];
    for (const call of calls) messages.push(await this.run(call, thread, config));
    return { messages };
  }

  private async run(call: ToolCall, thread: string, config: RunnableConfig): Promise<ToolMessage> {
    const callId = String(call.id ?? "");
    const tool = this.tools.get(call.name);
    if (tool === undefined) {
      return new ToolMessage({ content: `Unknown tool ${JSON.stringify(call.name)}.`, tool_call_id: callId, status: "error" });
    }
    if (!this.rules.isGated(tool.name)) {
      return new ToolMessage({ content: String(await tool.invoke(call.args, config)), tool_call_id: callId });
    }
    return this.runApproved(tool, call, callId, thread, config);
  }

  private async runApproved(
    tool: StructuredToolInterface,
    call: ToolCall,
    callId: string,
    thread: string,
    config: RunnableConfig,
  ): Promise<ToolMessage> {
    const key = `langgraph-${requestKey(thread, callId)}`;
    const description = this.descriptions.get(tool.name) ?? new ToolDescription();
    const fields = description.requestFields(tool.name, call.args as JsonObject, {
      toolText: tool.description ?? "",
      argumentOrder: argumentNames(tool),
      context: config,
      defaultPrincipal: this.principal,
      effect: `runs the tool ${tool.name}`,
    });
    fields.consequences.risk ??= riskHint(tool.name) ?? "gated";
    const request = buildRequest(fields.action, {
      summary: fields.summary,
      principal: (fields.principal ?? this.principal) as unknown as JsonObject,
      consequences: fields.consequences,
      agentVersion: this.agentVersion,
      requestId: key,
    });
    // Submitting again (the node re-runs on resume) answers the same proposal.
    const submission = await this.client.submit(request, { taskId: key, contextId: thread });
    let token = submission.token; // policy decided at intake: no pause
    if (!token) {
      const resumed = interrupt<ApprovalInterrupt, { token?: string; refusal?: string } | undefined>({
        kind: INTERRUPT_KIND,
        proposal_id: submission.proposalId,
        tool_call_id: callId,
        summary: String(request.summary),
        action: request.action as JsonObject,
      });
      token = resumed?.token ?? null;
      if (!token) {
        return refused(callId, new NotApproved(resumed?.refusal ?? "no_decision", "the graph resumed without a decision"));
      }
    }
    let approval: Approval;
    try {
      approval = await this.client.release(submission, token);
    } catch (error) {
      if (error instanceof NotApproved) return refused(callId, error);
      throw error;
    }
    if (approval.action.tool !== (request.action as JsonObject).tool) {
      await approval.report("failed", { detail: "the approved action names another tool; nothing was run" });
      return new ToolMessage({
        content: "The approved action names another tool; nothing was run.",
        tool_call_id: callId,
        status: "error",
      });
    }
    let output: unknown;
    try {
      // the tool reads currentApproval()?.idempotencyKey
      output = await runningUnder(approval, () => tool.invoke((approval.action.arguments ?? {}) as object, config));
    } catch (error) {
      await approval.report("unknown", { detail: `tool raised ${String(error)}`.slice(0, 2000) });
      throw error;
    }
    await approval.report("succeeded");
    return new ToolMessage({
      content: String(output),
      tool_call_id: callId,
      artifact: { decision_id: approval.idempotencyKey, edited: approval.edited },
    });
  }
}

function refused(callId: string, refusal: NotApproved): ToolMessage {
  const content =
    refusal.code === "rejected"
      ? `Rejected by the reviewer: ${refusal.reason || "no reason given"}. Nothing was run.`
      : `Not approved (${refusal.code}): ${refusal.reason}. Nothing was run.`;
  return new ToolMessage({ content, tool_call_id: callId, status: "error" });
}

// `any`: the compiled graph's generics are the caller's.
type CompiledGraph = {
  getState(config: RunnableConfig): Promise<{ tasks: { interrupts: { id?: string; value?: unknown }[] }[] }>;
  invoke(input: unknown, config: RunnableConfig): Promise<any>;
};

function isOurs(value: unknown): value is ApprovalInterrupt {
  return typeof value === "object" && value !== null && (value as { kind?: unknown }).kind === INTERRUPT_KIND;
}

async function ourInterrupts(graph: CompiledGraph, config: RunnableConfig): Promise<{ id: string; value: ApprovalInterrupt }[]> {
  const snapshot = await graph.getState(config);
  return snapshot.tasks
    .flatMap((task) => task.interrupts)
    .filter((interruption): interruption is { id: string; value: ApprovalInterrupt } => isOurs(interruption.value) && !!interruption.id);
}

/** The Reviewer approvals the paused graph waits for (the interrupt values of this adapter). */
export async function pendingApprovals(graph: CompiledGraph, config: RunnableConfig): Promise<ApprovalInterrupt[]> {
  return (await ourInterrupts(graph, config)).map((interruption) => interruption.value);
}

/**
 * Wait for each pending approval's decision (long poll), then resume the graph with the tokens.
 * Proposals that closed without a decision (expired, cancelled) resume with their state as `refusal`,
 * so the node answers the model instead of waiting forever.
 */
export async function resumeWithDecisions(
  graph: CompiledGraph,
  config: RunnableConfig,
  client: ReviewerClient,
  options: { timeoutSeconds?: number | null } = {},
): Promise<any> {
  const resume: Record<string, { token: string } | { refusal: string }> = {};
  for (const { id, value } of await ourInterrupts(graph, config)) {
    try {
      resume[id] = { token: await client.waitForProposal(value.proposal_id, { timeoutSeconds: options.timeoutSeconds }) };
    } catch (error) {
      if (!(error instanceof NotApproved)) throw error;
      resume[id] = { refusal: error.code };
    }
  }
  return graph.invoke(new Command({ resume }), config);
}
