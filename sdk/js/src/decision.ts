/**
 * The decision token's contract as the gate reads it: the constants, the verified decision, the claim
 * checks that need no key, and the A2A metadata helpers (the Python package's reviewer_gate.decision).
 */
import { canonicalize } from "./canonical.js";
import { GateError } from "./errors.js";

export const EXTENSION_URI = "urn:reviewer:a2a:approval:v1";
export const TOKEN_TYPE = "approval-decision+jwt";
/** Fixed, never taken from the token: `none`, HS* (the public key used as an HMAC secret), RS* are refused. */
export const ALGORITHMS: readonly string[] = ["EdDSA"];
export const DECISIONS = ["approved", "rejected", "needs_info"] as const;
export type DecisionKind = (typeof DECISIONS)[number];
/** Every decision carries these; a token without one of them (or with one null) is refused. */
export const REQUIRED_CLAIMS: readonly string[] = [
  "iss",
  "aud",
  "sub",
  "jti",
  "iat",
  "nbf",
  "exp",
  "request_id",
  "action_digest",
  "decision",
];

export type JsonObject = Record<string, unknown>;

export interface PolicyRef {
  id: string;
  version: number;
}

/** A decision whose signature, audience, time, binding and single use were checked. */
export interface VerifiedDecision {
  readonly jti: string;
  /** "approved" | "rejected" | "needs_info"; only "approved" may lead to action. */
  readonly decision: DecisionKind;
  /** decision === "approved" */
  readonly approved: boolean;
  readonly reason: string;
  readonly taskId: string;
  readonly contextId: string | null;
  readonly requestId: string;
  readonly proposalId: string | null;
  readonly actionDigest: string;
  readonly rev: number | null;
  /** true: call `gate.consume(decision)` right before the side effect. */
  readonly consume: boolean;
  readonly approvers: JsonObject[];
  readonly policy: PolicyRef;
  readonly policies: PolicyRef[];
  readonly tenant: string | null;
  /** The token's exp (seconds since the epoch). */
  readonly expiresAt: number;
  readonly claims: JsonObject;
  /**
   * The exact action the decision releases. It differs from what the agent asked for only when a
   * reviewer edited it (`edited`): then execute this action, never the original one.
   */
  readonly action: JsonObject | null;
  readonly edited: boolean;
}

export function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isPolicyRef(value: unknown): value is PolicyRef {
  return (
    isObject(value) &&
    typeof value.id === "string" &&
    value.id.length > 0 &&
    typeof value.version === "number" &&
    Number.isInteger(value.version)
  );
}

function sameJson(left: unknown, right: unknown): boolean {
  return canonicalize(left) === canonicalize(right);
}

/**
 * Every decision names the policy that decided it (`policy: {id, version}`); a token without one is
 * malformed. `policies` is optional for older tokens, but when present it is a list of such objects
 * naming `policy` too.
 */
export function checkPolicy(claims: JsonObject): void {
  const policy = claims.policy;
  if (!isPolicyRef(policy)) {
    throw new GateError("bad_policy", `the decision names no policy object {id, version}: ${JSON.stringify(policy)}`);
  }
  const policies = claims.policies;
  if (
    policies !== undefined &&
    policies !== null &&
    (!Array.isArray(policies) ||
      !policies.every(isPolicyRef) ||
      !policies.some((each) => sameJson(each, policy)))
  ) {
    throw new GateError("bad_policy", "policies must be a list of {id, version} objects that includes policy");
  }
}

/** A deadline as seconds since the epoch: a Date, an RFC 3339 string with a zone, or epoch seconds. */
export function epochSeconds(moment: unknown): number {
  if (moment instanceof Date) {
    if (Number.isNaN(moment.getTime())) throw new GateError("not_configured", "expiresAt is an invalid Date");
    return moment.getTime() / 1000;
  }
  if (typeof moment === "string") {
    // RFC 3339 with a zone (Z or an offset); Date.parse would read a time without one as local time.
    if (!/^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/i.test(moment)) {
      throw new GateError("not_configured", `expiresAt is not an RFC 3339 time with a zone: ${JSON.stringify(moment)}`);
    }
    const parsed = Date.parse(moment);
    if (Number.isNaN(parsed)) {
      throw new GateError("not_configured", `expiresAt is not an RFC 3339 time: ${JSON.stringify(moment)}`);
    }
    return parsed / 1000;
  }
  if (typeof moment === "number" && Number.isFinite(moment)) return moment;
  throw new GateError("not_configured", `expiresAt is not a time: ${JSON.stringify(moment)}`);
}

/** A whole number, or null for a claim that is absent; a fraction is a bad claim. */
function optionalInteger(value: unknown): number | null {
  if (value === undefined || value === null || typeof value === "boolean") return null;
  if (typeof value === "number" && Number.isInteger(value)) return value;
  throw new GateError("bad_claim", `expected an integer, got ${JSON.stringify(value)}`);
}

/**
 * The agent's own deadline binds whatever Reviewer signed: no clock skew is granted on it (it is the
 * agent's clock), and a token that would outlive it is refused as Reviewer should never sign one.
 */
export function checkRequestDeadline(claims: JsonObject, deadline: number, now: number): void {
  if (now >= deadline) {
    throw new GateError("request_expired", "the request's own expires_at has passed; nothing may execute");
  }
  const exp = optionalInteger(claims.exp);
  if (exp === null || exp > deadline) {
    throw new GateError("request_expired", "the decision's exp is later than the request's expires_at");
  }
}

export function decisionFromClaims(claims: JsonObject, edited: boolean): VerifiedDecision {
  const jti = claims.jti;
  if (typeof jti !== "string" || !jti) throw new GateError("bad_claim", "jti must be a non-empty string");
  const consume = claims.consume ?? false;
  if (typeof consume !== "boolean") throw new GateError("bad_claim", "consume must be a boolean");
  const policy = claims.policy as PolicyRef;
  const policies = Array.isArray(claims.policies) && claims.policies.length ? claims.policies : [policy];
  const decision = claims.decision as DecisionKind;
  return Object.freeze({
    jti,
    decision,
    approved: decision === "approved",
    reason: typeof claims.reason === "string" ? claims.reason : claims.reason ? String(claims.reason) : "",
    taskId: claims.sub as string,
    contextId: typeof claims.context_id === "string" ? claims.context_id : null,
    requestId: claims.request_id as string,
    proposalId: typeof claims.proposal_id === "string" ? claims.proposal_id : null,
    actionDigest: claims.action_digest as string,
    rev: optionalInteger(claims.rev),
    consume,
    approvers: Array.isArray(claims.approvers) ? (claims.approvers as JsonObject[]) : [],
    policy,
    policies: policies as PolicyRef[],
    tenant: typeof claims.tenant === "string" ? claims.tenant : null,
    expiresAt: Math.trunc(Number(claims.exp)),
    claims,
    action: isObject(claims.action) ? claims.action : null,
    edited,
  });
}

/** The decision JWT in an A2A continuation message's metadata, or null. */
export function decisionTokenFromMetadata(metadata: unknown): string | null {
  if (!isObject(metadata)) return null;
  const extension = metadata[EXTENSION_URI];
  if (!isObject(extension)) return null;
  const token = extension.decision;
  return typeof token === "string" && token ? token : null;
}

/** The A2A status-message metadata that asks Reviewer for approval of `request`. */
export function approvalRequestMetadata(request: JsonObject): JsonObject {
  return { [EXTENSION_URI]: { request: JSON.parse(JSON.stringify(request)) as JsonObject } };
}
