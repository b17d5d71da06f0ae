/**
 * The OpenAI Agents SDK's tool approvals, decided by Reviewer (`@reviewer/gate/openai-agents`; the Python
 * package's reviewer_gate.openai_agents).
 *
 *     const approvals = new ReviewerApprovals(client, { principal: { id: "u-7", display: "Casey" } });
 *     const refund = approvals.gate(refundTool, new ToolDescription({ name: "payments.refund", currency: "EUR" }));
 *     const agent = new Agent({ name: "ops", tools: [refund, lookupOrder] });
 *     const result = await approvals.run(agent, "Refund order 1182"); // run() + Reviewer's decisions
 *
 * `gate(tool)` turns on the SDK's approval hook for a function tool (`needsApproval`), so the run stops
 * with an interruption before the call, and makes the tool itself enforce Reviewer's decision: it runs
 * only with an approval Reviewer signed for THIS call id, that the gate verified and that was consumed,
 * with the approved arguments (a reviewer's edit when there was one), once; inside it,
 * `currentApproval()?.idempotencyKey` is the key to send downstream. A call approved any other way
 * (`state.approve(item)` by hand) gets a refusal as its output and runs nothing.
 *
 * `run(agent, input)` is the SDK's `run` that, at each interruption for a gated tool, submits the call as
 * a proposal (described by the tool's ToolDescription, whose `principal` gets the run's `context`), waits
 * for the decision (none when policy decided at intake) and approves the item (the tool will run) or
 * rejects it with the reviewer's reason as the text the model reads. Interruptions of tools it does not
 * gate are left to the caller.
 */
import { run as sdkRun, type Agent, type FunctionTool, type RunContext, type RunToolApprovalItem } from "@openai/agents";

import { runningUnder, type Approval } from "../approval.js";
import type { ReviewerClient } from "../client.js";
import type { JsonObject } from "../decision.js";
import { ToolDescription, type Principal } from "../describe.js";
import { NotApproved } from "../errors.js";
import { riskHint } from "../risk.js";

// `any`: the SDK's generics are the caller's.
type AnyFunctionTool = FunctionTool<any, any, any>;
type Runner = (agent: Agent<any, any>, input: any, options?: any) => Promise<any>;

export interface ReviewerApprovalsOptions {
  /** Who the agent acts for when a description names no `principal` function. */
  principal?: Principal;
  agentVersion?: string;
  /** Give up waiting for a decision after this many seconds (the call is then rejected). */
  decisionTimeoutSeconds?: number | null;
  /** The SDK's run function (default: `run` of @openai/agents; pass a Runner's bound `run`). */
  run?: Runner;
}

function argumentNames(tool: AnyFunctionTool): string[] {
  const properties = (tool.parameters as { properties?: Record<string, unknown> } | undefined)?.properties;
  return Object.keys(properties ?? {});
}

/** (call id, tool name, parsed arguments) of an interruption's function call. */
function callOf(item: RunToolApprovalItem): { callId: string; toolName: string; args: JsonObject } {
  const raw = item.rawItem as { callId?: string; id?: string; name?: string; arguments?: string };
  const text = item.arguments ?? raw.arguments ?? "{}";
  const parsed: unknown = typeof text === "string" ? JSON.parse(text || "{}") : text;
  return {
    callId: String(raw.callId ?? raw.id),
    toolName: String(item.name ?? raw.name),
    args: (typeof parsed === "object" && parsed !== null ? parsed : {}) as JsonObject,
  };
}

export class ReviewerApprovals {
  readonly client: ReviewerClient;
  readonly principal: Principal;
  readonly agentVersion: string;
  readonly decisionTimeoutSeconds: number | null;
  private readonly runner: Runner;
  private readonly gated = new Map<string, { tool: AnyFunctionTool; description: ToolDescription }>();
  /** call id -> verified, consumed, not yet used */
  private readonly released = new Map<string, Approval>();

  constructor(client: ReviewerClient, options: ReviewerApprovalsOptions = {}) {
    this.client = client;
    this.principal = options.principal ?? { id: "openai-agents", display: "OpenAI Agents SDK run" };
    this.agentVersion = options.agentVersion ?? "openai-agents";
    this.decisionTimeoutSeconds = options.decisionTimeoutSeconds ?? null;
    this.runner = options.run ?? (sdkRun as Runner);
  }

  /**
   * Make `tool` ask Reviewer (the SDK's approval hook) and run only on a released approval;
   * `description` says how its calls read for the reviewers (checked now against its schema).
   */
  gate<T extends AnyFunctionTool>(tool: T, description: ToolDescription = new ToolDescription()): T {
    description.checked(tool.name, argumentNames(tool));
    const original = tool.invoke.bind(tool);
    tool.invoke = async (runContext: RunContext<any>, input: string, details?: any) => {
      const callId = details?.toolCall?.callId as string | undefined;
      const approval = callId === undefined ? undefined : this.released.get(callId);
      if (approval === undefined) {
        return `${tool.name} was not approved by Reviewer for this call; nothing was run.`;
      }
      this.released.delete(callId as string); // single use
      const args = (approval.action.arguments ?? {}) as JsonObject;
      let output;
      try {
        // the tool reads currentApproval()?.idempotencyKey
        output = await runningUnder(approval, () => original(runContext, JSON.stringify(args), details));
      } catch (error) {
        await approval.report("unknown", { detail: `tool raised ${String(error)}`.slice(0, 2000) });
        throw error;
      }
      await approval.report("succeeded");
      return output;
    };
    tool.needsApproval = async () => true;
    this.gated.set(tool.name, { tool, description });
    return tool;
  }

  /** The SDK's run, resolving the interruptions of gated tools with Reviewer until none is left. */
  async run(agent: Agent<any, any>, input: unknown, options: Record<string, unknown> = {}): Promise<any> {
    let result = await this.runner(agent, input, options);
    while (result.interruptions?.length) {
      const ours = (result.interruptions as RunToolApprovalItem[]).filter((item) => this.gated.has(callOf(item).toolName));
      if (!ours.length) return result; // approvals for tools this object does not gate: the caller's
      const state = result.state;
      for (const item of ours) await this.decide(state, item, options.context);
      result = await this.runner(agent, state, options);
    }
    return result;
  }

  private async decide(state: any, item: RunToolApprovalItem, context: unknown): Promise<void> {
    const { callId, toolName, args } = callOf(item);
    const { tool, description } = this.gated.get(toolName) as { tool: AnyFunctionTool; description: ToolDescription };
    const fields = description.requestFields(toolName, args, {
      toolText: tool.description ?? "",
      argumentOrder: argumentNames(tool),
      context,
      defaultPrincipal: this.principal,
      effect: `runs the tool ${toolName}`,
    });
    fields.consequences.risk ??= riskHint(toolName) ?? "gated";
    let approval: Approval;
    try {
      approval = await this.client.requestApproval(fields.action, {
        summary: fields.summary,
        principal: (fields.principal ?? this.principal) as unknown as JsonObject,
        consequences: fields.consequences,
        taskId: `openai-agents-${callId}`,
        agentVersion: this.agentVersion,
        timeoutSeconds: this.decisionTimeoutSeconds,
      });
    } catch (error) {
      if (!(error instanceof NotApproved)) throw error;
      const message =
        error.code === "rejected"
          ? `Rejected by the reviewer: ${error.reason || "no reason given"}. Nothing was run.`
          : `Not approved (${error.code}): ${error.reason}. Nothing was run.`;
      state.reject(item, { message });
      return;
    }
    if (approval.action.tool !== (description.name ?? toolName)) {
      await approval.report("failed", { detail: "the approved action names another tool; nothing was run" });
      state.reject(item, { message: "The approved action names another tool; nothing was run." });
      return;
    }
    this.released.set(callId, approval);
    state.approve(item);
  }
}
