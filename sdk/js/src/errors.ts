/**
 * The refusals. Every code is the Python package's (reviewer-gate), so an agent's handling and logs read
 * the same in both languages; docs/agents/decision-token.md lists the gate's.
 */

/** The decision must not be acted on. `code` is stable and machine-readable. */
export class GateError extends Error {
  readonly code: string;
  readonly detail: string;

  constructor(code: string, message: string) {
    super(`${code}: ${message}`);
    this.name = "GateError";
    this.code = code;
    this.detail = message;
  }
}

/** Reviewer could not be reached or kept answering 5xx after the retries. */
export class ReviewerUnavailable extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ReviewerUnavailable";
  }
}

/**
 * Reviewer answered 429: this agent (or its tenant) is over a quota, and nothing was stored. Thrown at
 * once, never retried by the client; send the same request again after `retryAfter` seconds if you want
 * to (a submit is idempotent on task and request id).
 *
 * code: "rate_limited", "tenant_rate_limited", "too_many_open", "tenant_too_many_open",
 * "too_many_waits"; `retryAfter`: the Retry-After header in seconds (0 when it had none).
 */
export class Throttled extends ReviewerUnavailable {
  readonly code: string;
  readonly detail: string;
  readonly retryAfter: number;

  constructor(code: string, message: string, retryAfter: number) {
    super(message ? `${code}: ${message}` : code);
    this.name = "Throttled";
    this.code = code;
    this.detail = message;
    this.retryAfter = retryAfter;
  }
}

/**
 * Nothing may be executed. `code` says why, `reason` is the reviewer's words when there are any.
 *
 * code: "rejected", "needs_info" (a verified decision that is not an approval), a proposal state
 * ("expired", "cancelled", "revoked", "superseded", "denied"), "timeout" (the caller's deadline passed
 * first), or a GateError code ("replayed", "consume_refused:revoked", ...).
 */
export class NotApproved extends Error {
  readonly code: string;
  readonly reason: string;
  readonly decision: import("./decision.js").VerifiedDecision | undefined;

  constructor(code: string, reason = "", decision?: import("./decision.js").VerifiedDecision) {
    super(reason ? `${code}: ${reason}` : code);
    this.name = "NotApproved";
    this.code = code;
    this.reason = reason;
    this.decision = decision;
  }
}
