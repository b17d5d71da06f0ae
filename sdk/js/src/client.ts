/**
 * A REST client for agents that are not A2A servers (the Python package's reviewer_gate.client):
 *
 * 1. submit the approval request: `POST /api/v1/proposals` (idempotent on task id and request id, so
 *    retrying after a lost answer is safe); when policy decided at intake (allowed or denied) the answer
 *    carries the signed decision as `token`, and step 2 is skipped; `requestApproval` asks Reviewer to
 *    consume an approval made there at once (`Prefer: consume`), and then step 4 is skipped too;
 * 2. otherwise wait for it: `GET /api/v1/proposals/<id>/decision?wait=<s>`, a bounded long poll that
 *    holds no request slot on the server, repeated until the decision exists or the proposal closed;
 * 3. verify it with the gate against what the agent asked for (never against anything in the answer);
 * 4. consume it right before the side effect (approved decisions only);
 * 5. report the outcome afterwards.
 *
 *     const client = new ReviewerClient({ reviewerUrl, apiToken, audience, tenant: "acme", agent: "refunds" });
 *     const approval = await client.requestApproval(action, { summary: "Refund EUR 40.00", principal: { id: "u-7" } });
 *     const result = await doIt(approval.action, approval.idempotencyKey); // act once
 *     await approval.report("succeeded", { transactionId: result.id });
 *
 * `requestApproval` resolves only for an approved, verified and consumed decision; otherwise it rejects
 * with NotApproved (rejected, needs_info, expired, cancelled, revoked, ... and every GateError code), and
 * the agent must not act. A 429 rejects at once with Throttled; 502/503/504 and connection errors are
 * retried with exponential backoff, honouring Retry-After.
 */
import { createHash, randomUUID } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { Approval, Submission, buildRequest, stillWaiting, type RequestFields } from "./approval.js";
import { isObject, type JsonObject } from "./decision.js";
import { GateError, NotApproved, ReviewerUnavailable, Throttled } from "./errors.js";
import { Gate } from "./gate.js";
import { bearer, call, errorOf, retryAfterSeconds, type Answer } from "./http.js";
import { JWKSKeySource } from "./keys.js";
import { FileUsedStore, type UsedDecisionStore } from "./used-stores.js";

/** Retried, with Retry-After honoured (503: overloaded). */
const RETRIED_STATUSES = new Set([502, 503, 504]);
/** Never retried here: Reviewer asks this agent to slow down, and only the caller can decide how. */
const THROTTLED = 429;
/** The server's bound on one long poll. */
export const MAX_WAIT_SECONDS = 60;

const sleep = (seconds: number) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));
const monotonic = () => performance.now() / 1000;

/** Reviewer refused the request itself (400, 401, 404, ...): `code` and `field` are Reviewer's. */
export class RequestRefused extends Error {
  readonly code: string | null;
  readonly field: string | null;
  readonly status: number;

  constructor(status: number, code: string | null, message: string, field: string | null) {
    super(`Reviewer refused the request: ${code}: ${message}${field ? ` (field ${field})` : ""}`);
    this.name = "RequestRefused";
    this.status = status;
    this.code = code;
    this.field = field;
  }
}

export interface ReviewerClientOptions {
  reviewerUrl: string;
  apiToken: string | null;
  /** The audience this agent registered with (the `aud` of its decisions). */
  audience: string;
  /** Reviewer's issuer (REVIEWER_ISSUER); default: reviewerUrl. */
  issuer?: string;
  /** Default: <reviewerUrl>/.well-known/jwks.json */
  jwksUrl?: string;
  /**
   * Where used decisions are recorded. Default: a FileUsedStore under the system's temporary directory,
   * one per issuer and audience, shared by the processes of this machine; pass your own (e.g. on a
   * persistent or shared volume) when the agent runs elsewhere or its temporary files are cleared.
   */
  usedStore?: UsedDecisionStore;
  gate?: Gate;
  httpTimeoutSeconds?: number;
  retries?: number;
  backoffSeconds?: number;
  pollSeconds?: number;
  /** The agent's tenant slug: the gate refuses a decision signed for another tenant (wrong_tenant). */
  tenant?: string | null;
  /** The slug of the agent's registration, stated in every request it sends (`request.agent`). */
  agent?: string | null;
}

export interface WaitOptions {
  /** Give up (NotApproved "timeout") after this many seconds. */
  timeoutSeconds?: number | null;
  /** Called after each long poll that brought no decision. */
  onWait?: (state: string, elapsedSeconds: number) => void | Promise<void>;
}

export interface SubmitOptions {
  /** The unit of work the decision is bound to (its `sub`); default: a fresh id. */
  taskId?: string;
  contextId?: string;
  /**
   * The caller acts on a decision policy makes at intake from this answer (`Submission.token`), so
   * Reviewer holds the task's A2A continuation (`Prefer: decision-in-answer`). false for a caller that
   * waits for the continuation instead.
   */
  decisionInAnswer?: boolean;
  /**
   * An approval policy makes at intake is consumed for this agent in the same request (`Prefer:
   * consume`); then `Submission.consumed` is true and `release` verifies without consuming. Only for a
   * caller that acts right after this answer: the approval's one execution is spent when it arrives.
   */
  consume?: boolean;
}

export type ApprovalOptions = RequestFields & WaitOptions & { taskId?: string; contextId?: string };

/**
 * The preferences a Prefer or Preference-Applied header names (RFC 7240), without their values and
 * parameters: "decision-in-answer, consume" → {"decision-in-answer", "consume"}.
 */
export function preferenceNames(header: string | null | undefined): Set<string> {
  return new Set(
    (header ?? "")
      .split(",")
      .map((item) => ((item.split(";")[0] ?? "").split("=")[0] ?? "").trim().toLowerCase())
      .filter((name) => name),
  );
}

function defaultUsedStore(issuer: string, audience: string): FileUsedStore {
  const name = createHash("sha256").update(`${issuer}\n${audience}`).digest("hex").slice(0, 16);
  return new FileUsedStore(join(tmpdir(), "reviewer-gate", `used-${name}`));
}

/** One agent's conversation with Reviewer (its API token, its audience). */
export class ReviewerClient {
  readonly reviewerUrl: string;
  readonly apiToken: string | null;
  readonly agent: string | null;
  readonly httpTimeoutSeconds: number;
  readonly retries: number;
  readonly backoffSeconds: number;
  readonly pollSeconds: number;
  readonly gate: Gate;

  constructor(options: ReviewerClientOptions) {
    this.reviewerUrl = options.reviewerUrl.replace(/\/+$/, "");
    this.apiToken = options.apiToken ?? null;
    this.agent = options.agent ?? null;
    this.httpTimeoutSeconds = options.httpTimeoutSeconds ?? 10;
    this.retries = options.retries ?? 4;
    this.backoffSeconds = options.backoffSeconds ?? 0.5;
    this.pollSeconds = Math.max(0, Math.min(Math.trunc(options.pollSeconds ?? 30), MAX_WAIT_SECONDS));
    const issuer = (options.issuer ?? this.reviewerUrl).replace(/\/+$/, "");
    this.gate =
      options.gate ??
      new Gate({
        issuer,
        audience: options.audience,
        keys: new JWKSKeySource(options.jwksUrl ?? `${this.reviewerUrl}/.well-known/jwks.json`),
        usedStore: options.usedStore ?? defaultUsedStore(issuer, options.audience),
        reviewerUrl: this.reviewerUrl,
        apiToken: this.apiToken,
        tenant: options.tenant ?? null,
      });
  }

  // HTTP with retries ----------------------------------------------------------------------------

  /**
   * One request, retried with exponential backoff on connection errors and 502/503/504 (at most
   * `retries` times, waiting at least what Retry-After says). A 429 rejects with Throttled at once.
   * Only idempotent calls go through here (submit is idempotent on task and request id; the pull is a
   * read). Consume and outcome are the gate's, which never retries a consume that may have run.
   */
  private async send(
    method: string,
    path: string,
    options: { body?: unknown; headers?: Record<string, string>; timeoutSeconds?: number } = {},
  ): Promise<Answer> {
    const url = `${this.reviewerUrl}${path}`;
    let delay = this.backoffSeconds;
    for (let attempt = 0; ; attempt += 1) {
      const last = attempt >= this.retries;
      let answer: Answer;
      try {
        answer = await call(method, url, {
          body: options.body,
          headers: { ...bearer(this.apiToken), ...options.headers },
          timeoutSeconds: options.timeoutSeconds ?? this.httpTimeoutSeconds,
        });
      } catch (error) {
        if (last) throw new ReviewerUnavailable(`${method} ${url}: ${String(error)}`);
        await sleep(delay); // backoff between retries of a failed call
        delay = Math.min(delay * 2, 10);
        continue;
      }
      if (answer.status === THROTTLED) {
        const { code, message } = errorOf(answer);
        throw new Throttled(code ?? "throttled", message, retryAfterSeconds(answer, 0, Infinity, 0));
      }
      if (!RETRIED_STATUSES.has(answer.status)) return answer;
      if (last) throw new ReviewerUnavailable(`${method} ${url}: HTTP ${answer.status}`);
      delay = Math.max(delay, retryAfterSeconds(answer, 0, 10, 0)); // an overloaded Reviewer says when
      await sleep(delay);
      delay = Math.min(delay * 2, 10);
    }
  }

  // the steps ------------------------------------------------------------------------------------

  /** The request naming this agent's registration (`agent`), when the client was given one. */
  stamped(request: JsonObject): JsonObject {
    if (!this.agent || request.agent) return request;
    return { ...request, agent: this.agent };
  }

  /** Announce the request (`POST /api/v1/proposals`). */
  async submit(request: JsonObject, options: SubmitOptions = {}): Promise<Submission> {
    const stamped = this.stamped(request);
    const taskId = options.taskId ?? `task-${randomUUID()}`;
    const contextId = options.contextId ?? "";
    // RFC 7240 preferences; a Reviewer that knows neither ignores them.
    const preferences = [
      ...(options.decisionInAnswer === false ? [] : ["decision-in-answer"]),
      ...(options.consume ? ["consume"] : []),
    ];
    const answer = await this.send("POST", "/api/v1/proposals", {
      body: { task_id: taskId, context_id: contextId, request: stamped },
      headers: preferences.length ? { Prefer: preferences.join(", ") } : {},
    });
    if (answer.status !== 200 && answer.status !== 201) {
      const { code, message, field } = errorOf(answer);
      throw new RequestRefused(answer.status, code, message, field);
    }
    const receipt = answer.body as JsonObject;
    return new Submission(
      taskId,
      contextId,
      stamped,
      String(receipt.proposal_id),
      String(receipt.state),
      typeof receipt.token === "string" && receipt.token ? receipt.token : null,
      options.consume === true && preferenceNames(answer.headers.get("Preference-Applied")).has("consume"),
    );
  }

  /** One long poll: the token (null while undecided or when it never will be) and the state. */
  async pollDecision(proposalId: string, wait?: number): Promise<{ token: string | null; state: string }> {
    const seconds = wait === undefined ? this.pollSeconds : Math.max(0, Math.min(Math.trunc(wait), MAX_WAIT_SECONDS));
    const path = `/api/v1/proposals/${encodeURIComponent(proposalId)}/decision?wait=${seconds}`;
    const answer = await this.send("GET", path, { timeoutSeconds: seconds + this.httpTimeoutSeconds });
    if (answer.status !== 200 || !isObject(answer.body)) {
      const { code, message } = errorOf(answer);
      throw new ReviewerUnavailable(`GET ${path}: ${code}: ${message}`);
    }
    const token = answer.body.token;
    return { token: typeof token === "string" && token ? token : null, state: String(answer.body.state ?? "") };
  }

  /** One long poll's wait: `pollSeconds`, shortened so the caller's deadline is kept. */
  private nextWait(started: number, timeoutSeconds: number | null | undefined): number {
    if (timeoutSeconds === undefined || timeoutSeconds === null) return this.pollSeconds;
    return Math.max(0, Math.min(this.pollSeconds, Math.trunc(timeoutSeconds - (monotonic() - started)) + 1));
  }

  /**
   * The decision's token: the one the intake answer carried, or long-poll until it exists. Rejects with
   * NotApproved when the proposal closed without one (expired, cancelled, ...) or the timeout passed.
   */
  waitForToken(submission: Submission, options: WaitOptions = {}): Promise<string> {
    if (submission.token) return Promise.resolve(submission.token);
    return this.waitForProposal(submission.proposalId, options);
  }

  /** `waitForToken` by proposal id (e.g. one kept in a paused run's state). */
  async waitForProposal(proposalId: string, options: WaitOptions = {}): Promise<string> {
    const started = monotonic();
    for (;;) {
      const { token, state } = await this.pollDecision(proposalId, this.nextWait(started, options.timeoutSeconds));
      if (token) return token;
      const elapsed = stillWaiting(state, started, options.timeoutSeconds);
      await options.onWait?.(state, elapsed);
    }
  }

  /** Verify the token against the submission, then consume it. Rejects with NotApproved on any doubt. */
  async release(submission: Submission, token: string): Promise<Approval> {
    let decision;
    try {
      decision = await this.gate.verify(token, {
        taskId: submission.taskId,
        requestId: submission.requestId,
        actionDigest: submission.actionDigest,
        expiresAt: (submission.request.expires_at as string | undefined) ?? null,
      });
    } catch (error) {
      if (error instanceof GateError) throw new NotApproved(error.code, error.detail);
      throw error;
    }
    if (!decision.approved) throw new NotApproved(decision.decision, decision.reason, decision);
    const action = decision.edited ? decision.action : (submission.request.action as JsonObject);
    if (!isObject(action)) throw new NotApproved("bad_claim", "the decision carries no action to execute", decision);
    if (decision.consume && !submission.consumed) {
      // consumed at intake: verified, not consumed again
      try {
        await this.gate.consume(decision); // right before the side effect; fails closed
      } catch (error) {
        if (error instanceof GateError) throw new NotApproved(error.code, error.detail, decision);
        throw error;
      }
    }
    return new Approval(decision, action, submission, this.gate);
  }

  /**
   * Submit, wait (unless policy decided at intake), verify, consume (at intake when policy allowed
   * there: `Prefer: consume`): resolves only when the agent may act.
   */
  async requestApproval(action: JsonObject, options: ApprovalOptions): Promise<Approval> {
    const request = buildRequest(action, options);
    const submission = await this.submit(request, {
      taskId: options.taskId,
      contextId: options.contextId,
      consume: true,
    });
    const token = await this.waitForToken(submission, options);
    return this.release(submission, token);
  }
}
