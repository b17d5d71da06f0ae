/**
 * Vercel AI SDK tool approval, decided by Reviewer (`@reviewer/gate/ai-sdk`).
 *
 *     const approvals = new ReviewerToolApprovals(client, { principal: { id: "u-7", display: "Casey" } });
 *     const tools = { refund: approvals.gate("refund", refundTool, new ToolDescription({ name: "payments.refund" })), lookupOrder };
 *     const result = await generateText({ model, tools, toolApproval: approvals.toolApproval(), prompt });
 *
 * `toolApproval()` is the `toolApproval` setting of generateText / streamText (AI SDK 7: approval is
 * decided there; a tool's own `needsApproval` is deprecated): for each call of a gated tool it submits
 * the call to Reviewer as a proposal (described by the tool's ToolDescription, whose `principal` gets the
 * run's `runtimeContext`), waits for the decision (none when policy decided at intake), verifies and
 * consumes it, and answers `approved` or `denied` with the reviewer's reason, which the model reads.
 *
 * `gate(name, tool)` makes the tool itself enforce Reviewer's decision: its `execute` runs only with an
 * approval Reviewer signed for THIS tool call id, verified and consumed, with the approved arguments (a
 * reviewer's edit when there was one), once, and reports the outcome; inside it
 * `currentApproval()?.idempotencyKey` is the key to send downstream. A call approved any other way gets a
 * refusal as its output and runs nothing.
 */
import type { Tool } from "ai";

import { runningUnder, type Approval } from "../approval.js";
import type { ReviewerClient } from "../client.js";
import type { JsonObject } from "../decision.js";
import { ToolDescription, type Principal } from "../describe.js";
import { NotApproved } from "../errors.js";
import { riskHint } from "../risk.js";

// `any`: the SDK's generics are the caller's.
type AnyTool = Tool<any, any, any>;

export type ReviewerApprovalStatus = { type: "approved"; reason?: string } | { type: "denied"; reason?: string };
export type ReviewerApprovalFunction = (
  input: unknown,
  options: { toolCallId: string; runtimeContext?: unknown },
) => Promise<ReviewerApprovalStatus>;

export interface ReviewerToolApprovalsOptions {
  /** Who the agent acts for when a description names no `principal` function. */
  principal?: Principal;
  agentVersion?: string;
  /** Give up waiting for a decision after this many seconds (the call is then denied). */
  decisionTimeoutSeconds?: number | null;
}

/** The argument names of a zod object schema or a JSON schema, in their order, when they can be read. */
function argumentNames(tool: AnyTool): string[] | undefined {
  const schema = tool.inputSchema as { shape?: object; jsonSchema?: { properties?: object } } | undefined;
  if (schema?.shape && typeof schema.shape === "object") return Object.keys(schema.shape);
  if (schema?.jsonSchema?.properties) return Object.keys(schema.jsonSchema.properties);
  return undefined;
}

export class ReviewerToolApprovals {
  readonly client: ReviewerClient;
  readonly principal: Principal;
  readonly agentVersion: string;
  readonly decisionTimeoutSeconds: number | null;
  private readonly gated = new Map<string, { tool: AnyTool; description: ToolDescription }>();
  /** tool call id -> verified, consumed, not yet used */
  private readonly released = new Map<string, Approval>();

  constructor(client: ReviewerClient, options: ReviewerToolApprovalsOptions = {}) {
    this.client = client;
    this.principal = options.principal ?? { id: "ai-sdk", display: "AI SDK run" };
    this.agentVersion = options.agentVersion ?? "ai-sdk";
    this.decisionTimeoutSeconds = options.decisionTimeoutSeconds ?? null;
  }

  /**
   * The tool, under the name the model calls it by, running only on a released Reviewer approval;
   * `description` says how its calls read for the reviewers (checked now against its input schema).
   */
  gate<T extends AnyTool>(name: string, tool: T, description: ToolDescription = new ToolDescription()): T {
    description.checked(name, argumentNames(tool));
    const execute = tool.execute;
    if (typeof execute !== "function") throw new TypeError(`${name} has no execute function to gate`);
    this.gated.set(name, { tool, description });
    const gatedExecute = async (_input: unknown, options: { toolCallId: string }) => {
      const approval = this.released.get(options.toolCallId);
      if (approval === undefined) return `${name} was not approved by Reviewer for this call; nothing was run.`;
      this.released.delete(options.toolCallId); // single use
      let output: unknown;
      try {
        // the tool reads currentApproval()?.idempotencyKey
        output = await runningUnder(approval, () => execute(approval.action.arguments ?? {}, options as any));
      } catch (error) {
        await approval.report("unknown", { detail: `tool raised ${String(error)}`.slice(0, 2000) });
        throw error;
      }
      await approval.report("succeeded");
      return output;
    };
    return { ...tool, execute: gatedExecute } as T;
  }

  /** The `toolApproval` setting for generateText / streamText: Reviewer decides each gated tool's calls. */
  toolApproval(): Record<string, ReviewerApprovalFunction> {
    return Object.fromEntries([...this.gated.keys()].map((name) => [name, (input, options) => this.decide(name, input, options)]));
  }

  private async decide(
    name: string,
    input: unknown,
    options: { toolCallId: string; runtimeContext?: unknown },
  ): Promise<ReviewerApprovalStatus> {
    const { tool, description } = this.gated.get(name) as { tool: AnyTool; description: ToolDescription };
    const args = (typeof input === "object" && input !== null ? input : {}) as JsonObject;
    const fields = description.requestFields(name, args, {
      toolText: typeof tool.description === "string" ? tool.description : "",
      argumentOrder: argumentNames(tool) ?? [],
      context: options.runtimeContext,
      defaultPrincipal: this.principal,
      effect: `runs the tool ${name}`,
    });
    fields.consequences.risk ??= riskHint(name) ?? "gated";
    let approval: Approval;
    try {
      approval = await this.client.requestApproval(fields.action, {
        summary: fields.summary,
        principal: (fields.principal ?? this.principal) as unknown as JsonObject,
        consequences: fields.consequences,
        taskId: `ai-sdk-${options.toolCallId}`,
        agentVersion: this.agentVersion,
        timeoutSeconds: this.decisionTimeoutSeconds,
      });
    } catch (error) {
      if (!(error instanceof NotApproved)) throw error;
      const reason =
        error.code === "rejected"
          ? `Rejected by the reviewer: ${error.reason || "no reason given"}. Nothing was run.`
          : `Not approved (${error.code}): ${error.reason}. Nothing was run.`;
      return { type: "denied", reason };
    }
    if (approval.action.tool !== (description.name ?? name)) {
      await approval.report("failed", { detail: "the approved action names another tool; nothing was run" });
      return { type: "denied", reason: "The approved action names another tool; nothing was run." };
    }
    this.released.set(options.toolCallId, approval);
    return { type: "approved", reason: approval.decision.reason };
  }
}
