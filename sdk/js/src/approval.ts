/**
 * What an agent holds while it asks Reviewer: the request it builds, the submission, and the approval it
 * may act on (the Python package's reviewer_gate.approval).
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { randomUUID } from "node:crypto";

import { actionDigest } from "./canonical.js";
import type { JsonObject, VerifiedDecision } from "./decision.js";
import { NotApproved } from "./errors.js";
import type { Gate, OutcomeStatus } from "./gate.js";

/** Proposal states after which no decision token will ever appear. */
export const CLOSED_WITHOUT_DECISION: ReadonlySet<string> = new Set(["expired", "cancelled", "revoked", "superseded"]);

/** What the agent asked for; the gate checks the decision against this, never against an answer. */
export class Submission {
  constructor(
    readonly taskId: string,
    readonly contextId: string,
    readonly request: JsonObject,
    readonly proposalId: string,
    readonly state: string,
    /** The signed decision when policy decided at intake (the intake answer's `token`), else null. */
    readonly token: string | null = null,
    /**
     * Reviewer consumed that decision for this agent at intake (`Prefer: consume` applied): the agent
     * verifies it and acts, with no consume request. Never true for a replay's answer.
     */
    readonly consumed: boolean = false,
  ) {}

  get requestId(): string {
    return String(this.request.request_id);
  }

  get actionDigest(): string {
    return String(this.request.action_digest);
  }
}

/** A verified, consumed approval: execute `action` once, with `idempotencyKey`, then `report`. */
export class Approval {
  constructor(
    readonly decision: VerifiedDecision,
    /** The reviewer's edit when there was one (`edited`), else what was asked. */
    readonly action: JsonObject,
    readonly submission: Submission,
    private readonly gate: Gate,
  ) {}

  /** The decision id: send it downstream as the idempotency key. */
  get idempotencyKey(): string {
    return this.decision.jti;
  }

  get edited(): boolean {
    return this.decision.edited;
  }

  /** Tell Reviewer how it ended (best effort, never rejects). */
  report(status: OutcomeStatus, options: { transactionId?: string; detail?: string } = {}): Promise<boolean> {
    return this.gate.reportOutcome(this.decision, status, options);
  }
}

const current = new AsyncLocalStorage<Approval>();

/**
 * The approval a tool is running under, inside a tool called by one of the adapters: use
 * `currentApproval()?.idempotencyKey` as the downstream idempotency key.
 */
export function currentApproval(): Approval | undefined {
  return current.getStore();
}

/** Run `work` with `approval` as the current one (what the adapters do around a gated tool). */
export function runningUnder<T>(approval: Approval, work: () => T): T {
  return current.run(approval, work);
}

/** Seconds waited so far; throws NotApproved when no decision will come, or the deadline passed. */
export function stillWaiting(state: string, startedSeconds: number, timeoutSeconds: number | null | undefined): number {
  if (CLOSED_WITHOUT_DECISION.has(state)) {
    throw new NotApproved(state, `the proposal is ${state}; nothing may be executed`);
  }
  const elapsed = performance.now() / 1000 - startedSeconds;
  if (timeoutSeconds !== undefined && timeoutSeconds !== null && elapsed >= timeoutSeconds) {
    throw new NotApproved("timeout", `no decision after ${Math.round(timeoutSeconds)}s; nothing may be executed`);
  }
  return elapsed;
}

/** An RFC 3339 UTC time to the second, as Reviewer reads `expires_at`. */
export function rfc3339(moment: Date): string {
  return `${moment.toISOString().slice(0, 19)}Z`;
}

export interface RequestFields {
  summary: string;
  principal: JsonObject;
  agentVersion?: string;
  consequences?: JsonObject;
  diff?: JsonObject[];
  evidence?: JsonObject[];
  /** The request's own deadline, this many seconds from now (`expires_at`). */
  ttlSeconds?: number;
  requestId?: string;
}

/** The approval request (docs/agents/a2a-extension.md), with a fresh request id and the action digest. */
export function buildRequest(action: JsonObject, fields: RequestFields): JsonObject {
  const request: JsonObject = {
    request_id: fields.requestId ?? randomUUID(),
    summary: fields.summary,
    action,
    action_digest: actionDigest(action),
    principal: fields.principal,
    agent_version: fields.agentVersion ?? "",
    consequences: fields.consequences ?? {},
    diff: fields.diff ?? [],
    evidence: fields.evidence ?? [],
  };
  if (fields.ttlSeconds !== undefined) {
    request.expires_at = rfc3339(new Date(Date.now() + fields.ttlSeconds * 1000));
  }
  return request;
}
