/**
 * Agent-side verifier for Reviewer's signed approval decisions: the Python package's
 * reviewer_gate.gate.Gate, with the same checks in the same order and the same error codes.
 *
 * What `verify` checks, in this order, so that a forged or altered token is refused before its jti is
 * burned:
 *
 * - the JOSE header: `alg` EdDSA only (`none`, HS*, RS* refused: bad_algorithm), `typ`
 *   approval-decision+jwt (bad_type), a `kid` the key source knows (unknown_kid, keys_unavailable);
 * - the Ed25519 signature, with jose (bad_signature);
 * - the required claims, then `iat`, `nbf`, `exp` with `leewaySeconds` (30) of clock skew, `iss`, `aud`
 *   (one string, equal), `sub` and `jti` strings: the order PyJWT checks them in (missing_claim,
 *   not_yet_valid, expired, wrong_issuer, wrong_audience, bad_claim, malformed);
 * - `tenant`, when the gate is given the agent's own tenant (wrong_tenant);
 * - `policy` an object {id, version}, and `policies`, when present, a list of them naming it (bad_policy);
 * - for an approval, the request's own deadline when the agent passes `expiresAt` (request_expired);
 * - `sub`, `request_id`, `action_digest` (and `context_id` when given) equal to what the agent asked
 *   for (wrong_task, wrong_context, wrong_request, wrong_digest), or a reviewer's edit: `replaces` names
 *   the agent's request and `action` hashes to `action_digest` (then `decision.edited` is true and the
 *   agent executes `decision.action`); `decision` one of the three kinds (bad_decision);
 * - last, single use: `usedStore.claim(jti, exp)` (replayed).
 */
import { compactVerify, decodeProtectedHeader, errors as joseErrors } from "jose";

import { actionDigest as digestOf } from "./canonical.js";
import {
  ALGORITHMS,
  DECISIONS,
  REQUIRED_CLAIMS,
  TOKEN_TYPE,
  checkPolicy,
  checkRequestDeadline,
  decisionFromClaims,
  epochSeconds,
  isObject,
  type JsonObject,
  type VerifiedDecision,
} from "./decision.js";
import { GateError } from "./errors.js";
import { bearer, call, errorOf, retryAfterSeconds, type Answer } from "./http.js";
import type { KeySource, PublicKey } from "./keys.js";
import type { UsedDecisionStore } from "./used-stores.js";

export interface GateOptions {
  issuer: string;
  audience: string;
  keys: KeySource;
  usedStore: UsedDecisionStore;
  reviewerUrl?: string | null;
  apiToken?: string | null;
  leewaySeconds?: number;
  httpTimeoutSeconds?: number;
  /** The agent's own tenant slug: a decision naming another tenant is refused (wrong_tenant). */
  tenant?: string | null;
  /** The clock, seconds since the epoch (tests). */
  now?: () => number;
}

export interface Binding {
  /** The agent's task id (the token's `sub`). */
  taskId: string;
  /** The request id the agent asked with. */
  requestId: string;
  /** The digest of the action the agent asked for (actionDigest(action)). */
  actionDigest: string;
  contextId?: string | null;
  /** The request's own deadline (the `expires_at` the agent put in its request), if it put one. */
  expiresAt?: Date | string | number | null;
}

export type OutcomeStatus = "succeeded" | "failed" | "unknown";

/** How long consume and outcome keep retrying an overloaded Reviewer. */
export const OVERLOAD_RETRY_SECONDS = 30;

const sleep = (seconds: number) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

/** Python's int() on a claim: a number truncated, a boolean as 0/1, a string of digits; else undefined. */
function pythonInt(value: unknown): number | undefined {
  if (typeof value === "number") return Number.isFinite(value) ? Math.trunc(value) : undefined;
  if (typeof value === "boolean") return value ? 1 : 0;
  if (typeof value === "string" && /^\s*[-+]?\d+\s*$/.test(value)) return Number.parseInt(value, 10);
  return undefined;
}

/** Verifies Reviewer's decisions for one agent (one audience) and talks back to Reviewer. */
export class Gate {
  readonly issuer: string;
  readonly audience: string;
  readonly tenant: string | null;
  readonly keys: KeySource;
  readonly usedStore: UsedDecisionStore;
  readonly reviewerUrl: string | null;
  readonly apiToken: string | null;
  readonly leewaySeconds: number;
  readonly httpTimeoutSeconds: number;
  private readonly now: () => number;

  constructor(options: GateOptions) {
    // Without them a verifier would accept another issuer's or agent's tokens: refuse to exist instead.
    for (const name of ["issuer", "audience"] as const) {
      const value: unknown = options[name];
      if (typeof value !== "string" || !value) {
        throw new GateError("not_configured", `the gate needs its ${name} (a non-empty string)`);
      }
    }
    if (options.tenant !== undefined && options.tenant !== null && (typeof options.tenant !== "string" || !options.tenant)) {
      throw new GateError("not_configured", "tenant, when given, is the agent's tenant slug");
    }
    this.issuer = options.issuer;
    this.audience = options.audience;
    this.tenant = options.tenant ?? null;
    this.keys = options.keys;
    this.usedStore = options.usedStore;
    this.reviewerUrl = options.reviewerUrl ? options.reviewerUrl.replace(/\/+$/, "") : null;
    this.apiToken = options.apiToken ?? null;
    this.leewaySeconds = options.leewaySeconds ?? 30;
    this.httpTimeoutSeconds = options.httpTimeoutSeconds ?? 5;
    this.now = options.now ?? (() => Date.now() / 1000);
  }

  // verify ---------------------------------------------------------------------------------------

  /** Check everything about the token, then burn its jti. Rejects with GateError on any doubt. */
  async verify(token: string, binding: Binding): Promise<VerifiedDecision> {
    const key = await this.keyFromHeader(token);
    const claims = await this.signedClaims(token, key);
    this.checkTenant(claims);
    checkPolicy(claims);
    if (binding.expiresAt !== undefined && binding.expiresAt !== null && claims.decision === "approved") {
      // Only a release is bound by it: a rejection or a question after the deadline still informs.
      checkRequestDeadline(claims, epochSeconds(binding.expiresAt), this.now());
    }
    checkBinding(claims, binding);
    const decision = decisionFromClaims(claims, claims.request_id !== binding.requestId);
    // Last, so that a token refused for any other reason does not use up the decision.
    if (!(await this.usedStore.claim(decision.jti, decision.expiresAt))) {
      throw new GateError("replayed", `decision ${decision.jti} was already used`);
    }
    return decision;
  }

  private async keyFromHeader(token: string): Promise<PublicKey> {
    if (typeof token !== "string" || token.split(".").length !== 3) {
      throw new GateError("malformed", "not a compact JWS");
    }
    let header: JsonObject;
    try {
      header = decodeProtectedHeader(token) as JsonObject;
    } catch (error) {
      throw new GateError("malformed", `unreadable JOSE header: ${String(error)}`);
    }
    if (!ALGORITHMS.includes(header.alg as string)) {
      throw new GateError("bad_algorithm", `alg ${JSON.stringify(header.alg)} is not one of ${ALGORITHMS.join(", ")}`);
    }
    if (header.typ !== TOKEN_TYPE) {
      throw new GateError("bad_type", `typ ${JSON.stringify(header.typ)} is not ${JSON.stringify(TOKEN_TYPE)}`);
    }
    const kid = header.kid;
    if (typeof kid !== "string" || !kid) throw new GateError("unknown_kid", "the token names no kid");
    return this.keys.keyFor(kid);
  }

  private async signedClaims(token: string, key: PublicKey): Promise<JsonObject> {
    let payload: Uint8Array;
    try {
      ({ payload } = await compactVerify(token, key, { algorithms: [...ALGORITHMS] }));
    } catch (error) {
      if (error instanceof joseErrors.JWSSignatureVerificationFailed) {
        throw new GateError("bad_signature", "Signature verification failed");
      }
      if (error instanceof joseErrors.JOSEAlgNotAllowed) throw new GateError("bad_algorithm", String(error));
      throw new GateError("malformed", String(error));
    }
    let claims: unknown;
    try {
      claims = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(payload));
    } catch (error) {
      throw new GateError("malformed", `Invalid payload string: ${String(error)}`);
    }
    if (!isObject(claims)) throw new GateError("malformed", "Invalid payload string: must be a json object");
    this.checkRegisteredClaims(claims);
    return claims;
  }

  /** The registered claims, in PyJWT's order, so that both packages name the same first problem. */
  private checkRegisteredClaims(claims: JsonObject): void {
    for (const name of REQUIRED_CLAIMS) {
      if (claims[name] === undefined || claims[name] === null) {
        throw new GateError("missing_claim", `Token is missing the "${name}" claim`);
      }
    }
    const now = this.now();
    const leeway = this.leewaySeconds;
    const iat = pythonInt(claims.iat);
    if (iat === undefined) throw new GateError("bad_claim", "Issued At claim (iat) must be an integer.");
    if (iat > now + leeway) throw new GateError("not_yet_valid", "The token is not yet valid (iat)");
    const nbf = pythonInt(claims.nbf);
    if (nbf === undefined) throw new GateError("malformed", "Not Before claim (nbf) must be an integer.");
    if (nbf > now + leeway) throw new GateError("not_yet_valid", "The token is not yet valid (nbf)");
    const exp = pythonInt(claims.exp);
    if (exp === undefined) throw new GateError("malformed", "Expiration Time claim (exp) must be an integer.");
    if (exp <= now - leeway) throw new GateError("expired", "Signature has expired");
    if (typeof claims.iss !== "string" || claims.iss !== this.issuer) {
      throw new GateError("wrong_issuer", "Invalid issuer");
    }
    if (!claims.aud) throw new GateError("missing_claim", 'Token is missing the "aud" claim');
    if (typeof claims.aud !== "string" || claims.aud !== this.audience) {
      throw new GateError("wrong_audience", "Audience doesn't match (strict)");
    }
    if (typeof claims.sub !== "string") throw new GateError("bad_claim", "Subject must be a string");
    if (typeof claims.jti !== "string") throw new GateError("bad_claim", "JWT ID must be a string");
  }

  private checkTenant(claims: JsonObject): void {
    if (this.tenant !== null && claims.tenant !== this.tenant) {
      throw new GateError(
        "wrong_tenant",
        `decision was made for tenant ${JSON.stringify(claims.tenant)}, not this agent's ${JSON.stringify(this.tenant)}`,
      );
    }
  }

  // consume and report ---------------------------------------------------------------------------

  private decisionUrl(decision: VerifiedDecision, verb: string): string {
    if (!this.reviewerUrl) throw new GateError("not_configured", "the gate has no reviewerUrl");
    return `${this.reviewerUrl}/api/v1/decisions/${encodeURIComponent(decision.jti)}/${verb}`;
  }

  /**
   * POST, sent again while Reviewer answers 503 `overloaded`: its concurrency limit refused the request
   * before it ran (nothing happened), so sending it again is safe even for a consume. Waits what
   * Retry-After says (at most 10 s each), for at most OVERLOAD_RETRY_SECONDS in all; any other answer
   * (a 503 while halted included) is returned as it came.
   */
  private async post(url: string, body: JsonObject): Promise<Answer> {
    const deadline = performance.now() / 1000 + OVERLOAD_RETRY_SECONDS;
    for (;;) {
      const answer = await call("POST", url, {
        body,
        headers: bearer(this.apiToken),
        timeoutSeconds: this.httpTimeoutSeconds,
      });
      if (answer.status !== 503 || errorOf(answer).code !== "overloaded") return answer;
      const pause = retryAfterSeconds(answer, 0.1, 10, 1);
      if (performance.now() / 1000 + pause > deadline) return answer;
      await sleep(pause); // the backoff the server asked for
    }
  }

  /**
   * Ask Reviewer to move the decision approved → executing. Resolves only if the agent may act.
   *
   * Call it right before the side effect. Anything but HTTP 200 rejects with GateError: a 409 carries
   * Reviewer's reason (`consume_refused:revoked`, `:expired`, `:superseded`, `:consumed`, `:stale_rev`,
   * ...); a network error or a 5xx is `reviewer_unreachable`. In every error case the caller must not act.
   */
  async consume(decision: VerifiedDecision): Promise<void> {
    if (!decision.approved) {
      throw new GateError("consume_refused:not_approved", `decision is ${JSON.stringify(decision.decision)}`);
    }
    const url = this.decisionUrl(decision, "consume");
    let answer: Answer;
    try {
      answer = await this.post(url, { rev: decision.rev });
    } catch (error) {
      throw new GateError("reviewer_unreachable", `POST ${url}: ${String(error)}`);
    }
    if (answer.status === 200) return;
    if (answer.status >= 500) throw new GateError("reviewer_unreachable", `POST ${url}: HTTP ${answer.status}`);
    const { code, message } = errorOf(answer);
    if (answer.status === 409 && code) throw new GateError(`consume_refused:${code}`, message);
    throw new GateError(`consume_refused:http_${answer.status}`, message);
  }

  /** Tell Reviewer how the action ended. Best effort: resolves false (never rejects) when it could not. */
  async reportOutcome(
    decision: VerifiedDecision,
    status: OutcomeStatus,
    options: { transactionId?: string; detail?: string } = {},
  ): Promise<boolean> {
    const body: JsonObject = { status };
    if (options.transactionId !== undefined) body.transaction_id = options.transactionId;
    if (options.detail !== undefined) body.detail = options.detail;
    try {
      const answer = await this.post(this.decisionUrl(decision, "outcome"), body);
      return answer.status >= 200 && answer.status < 300;
    } catch {
      return false;
    }
  }
}

function checkBinding(claims: JsonObject, binding: Binding): void {
  if (claims.sub !== binding.taskId) {
    throw new GateError("wrong_task", `decision is for task ${JSON.stringify(claims.sub)}, not ${JSON.stringify(binding.taskId)}`);
  }
  if (binding.contextId !== undefined && binding.contextId !== null && claims.context_id !== binding.contextId) {
    throw new GateError("wrong_context", `decision is for context ${JSON.stringify(claims.context_id)}`);
  }
  if (claims.request_id === binding.requestId) {
    if (claims.action_digest !== binding.actionDigest) {
      throw new GateError("wrong_digest", "decision is for another action than the one this agent asked for");
    }
  } else if (Array.isArray(claims.replaces) && claims.replaces.includes(binding.requestId)) {
    // A reviewer edited the request into a new proposal: the decision is for the edited action, which
    // the token carries; it must hash to the signed digest, and only it may be executed.
    const edited = claims.action;
    if (!isObject(edited) || !digestsTo(edited, claims.action_digest)) {
      throw new GateError("wrong_digest", "the edited action in the decision does not match its digest");
    }
  } else {
    throw new GateError(
      "wrong_request",
      `decision answers request ${JSON.stringify(claims.request_id)}, not ${JSON.stringify(binding.requestId)}`,
    );
  }
  if (!(DECISIONS as readonly unknown[]).includes(claims.decision)) {
    throw new GateError("bad_decision", `unknown decision ${JSON.stringify(claims.decision)}`);
  }
}

function digestsTo(action: JsonObject, digest: unknown): boolean {
  try {
    return digestOf(action) === digest;
  } catch {
    return false; // an action with no canonical form matches no digest
  }
}
