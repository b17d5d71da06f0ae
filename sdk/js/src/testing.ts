/**
 * Test doubles for Reviewer's side of the gate, for an agent's own tests (`@reviewer/gate/testing`; the
 * Python package's reviewer_gate.testing): a real Ed25519 signing key, decision claims shaped like
 * Reviewer's, and a small HTTP server on loopback with Reviewer's agent-facing endpoints.
 */
import { randomUUID } from "node:crypto";
import { once } from "node:events";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

import { CompactSign, exportJWK, generateKeyPair, type CryptoKey } from "jose";

import { preferenceNames } from "./client.js";
import { TOKEN_TYPE, type JsonObject } from "./decision.js";

/** A Reviewer signing key: EdDSA over Ed25519, headers kid and typ, as approvals/signing.py signs. */
export class ReviewerKey {
  private constructor(
    readonly kid: string,
    private readonly privateKey: CryptoKey,
    private readonly publicJwk: JsonObject,
  ) {}

  static async create(kid = `ed25519-test-${randomUUID().slice(0, 8)}`): Promise<ReviewerKey> {
    const { privateKey, publicKey } = await generateKeyPair("EdDSA", { crv: "Ed25519", extractable: true });
    const { x } = await exportJWK(publicKey);
    return new ReviewerKey(kid, privateKey, { kty: "OKP", crv: "Ed25519", x, kid, alg: "EdDSA", use: "sig" });
  }

  jwk(): JsonObject {
    return { ...this.publicJwk };
  }

  /** The claims signed as they are (any JSON, so tests can sign what Reviewer never would). */
  sign(claims: JsonObject, header: { kid?: string; typ?: string } = {}): Promise<string> {
    return new CompactSign(new TextEncoder().encode(JSON.stringify(claims)))
      .setProtectedHeader({ alg: "EdDSA", kid: header.kid ?? this.kid, typ: header.typ ?? TOKEN_TYPE })
      .sign(this.privateKey);
  }
}

export interface DecisionClaimsOptions {
  issuer: string;
  audience: string;
  taskId: string;
  requestId: string;
  actionDigest: string;
  decision?: string;
  contextId?: string;
  consume?: boolean;
  reason?: string;
  lifetime?: number;
  now?: number;
  /** Claims replacing or adding to the defaults (`undefined` drops one). */
  overrides?: JsonObject;
}

/** The claims of docs/agents/decision-token.md (the keys approvals/signing.py writes). */
export function decisionClaims(options: DecisionClaimsOptions): JsonObject {
  const now = options.now ?? Math.floor(Date.now() / 1000);
  const claims: JsonObject = {
    iss: options.issuer,
    aud: options.audience,
    sub: options.taskId,
    jti: randomUUID(),
    iat: now,
    nbf: now,
    exp: now + (options.lifetime ?? 600),
    context_id: options.contextId ?? "ctx-1",
    request_id: options.requestId,
    proposal_id: randomUUID(),
    action_digest: options.actionDigest,
    decision: options.decision ?? "approved",
    reason: options.reason ?? "",
    approvers: [{ sub: "person:7", name: "Rita Reviewer", group: "finance", auth: { method: "totp", at: now } }],
    quorum: { required: [{ group: "finance", count: 1 }], approved_by: ["person:7"] },
    policy: { id: "refunds", version: 3 },
    tenant: "acme",
    rev: 2,
    consume: options.consume ?? true,
  };
  for (const [name, value] of Object.entries(options.overrides ?? {})) {
    if (value === undefined) delete claims[name];
    else claims[name] = value;
  }
  return claims;
}

export interface RecordedCall {
  body: JsonObject;
  authorization: string | undefined;
  prefer: string | undefined;
  jti?: string;
}

type Outcome = { token: string | null; state: string };

const DECISION_PATH = /^\/api\/v1\/decisions\/([^/]+)\/(consume|outcome)$/;
const PULL_PATH = /^\/api\/v1\/proposals\/([^/]+)\/decision$/;

/**
 * Reviewer's agent-facing HTTP surface on a loopback port, recording every call:
 *
 * - GET /.well-known/jwks.json (counted in `jwksFetches`)
 * - POST /api/v1/proposals → 201 with a new proposal_id (200 and the same id for a known request), with
 *   `token` set when `intakeDecision(body)` returns one (`decideAtIntake`)
 * - GET /api/v1/proposals/<id>/decision?wait=N → {token, state, proposal_id}, waiting up to N seconds
 *   for `decide(...)` or `close(...)` (the long poll)
 *   (`Prefer: consume`: an approval decided at intake is answered `executing`, consumed, with
 *   `Preference-Applied: consume`, unless `consumeAtIntake` is false; never on a replay)
 * - POST /api/v1/decisions/<jti>/consume → 200, or what `consumeAnswers.get(jti)` says
 * - POST /api/v1/decisions/<jti>/outcome → 200
 */
export class FakeReviewer {
  readonly keys: ReviewerKey[];
  jwksFetches = 0;
  readonly proposals: RecordedCall[] = [];
  readonly consumes: RecordedCall[] = [];
  readonly outcomes: RecordedCall[] = [];
  readonly pulls: string[] = [];
  readonly consumeAnswers = new Map<string, [number, JsonObject]>();
  /** Answer this many next API calls with 503 (retry tests). */
  unavailableAnswers = 0;
  /** ... with 503 "overloaded" and Retry-After: 0, as Reviewer's concurrency limit refuses a request. */
  overloadedAnswers = 0;
  /** ... with 429 and Retry-After (throttle(...)). */
  readonly throttledAnswers: Array<[string, number]> = [];
  /** What policy decides at intake: [token, state] or null (decideAtIntake). */
  intakeDecision: ((body: JsonObject) => Promise<[string, string] | null>) | null = null;
  /** Honour `Prefer: consume` as Reviewer does; false answers as a Reviewer that predates it. */
  consumeAtIntake = true;
  /** The proposal ids answered consumed at intake. */
  readonly consumedAtIntake: string[] = [];
  /** Called after each new proposal is recorded (decideNextProposal). */
  onProposal: ((body: JsonObject, proposalId: string) => void) | null = null;
  private readonly outcomeOf = new Map<string, Outcome>();
  private readonly proposalIds = new Map<string, string>();
  private readonly waiters = new Map<string, Array<() => void>>();
  private readonly server: Server;

  constructor(keys: ReviewerKey[]) {
    this.keys = [...keys];
    this.server = createServer((request, response) => {
      this.handle(request, response).catch((error: unknown) => {
        response.writeHead(500).end(String(error));
      });
    });
  }

  get url(): string {
    const { address, port } = this.server.address() as AddressInfo;
    return `http://${address}:${port}`;
  }

  async start(): Promise<this> {
    this.server.listen(0, "127.0.0.1");
    await once(this.server, "listening");
    return this;
  }

  async stop(): Promise<void> {
    for (const wake of [...this.waiters.values()].flat()) wake();
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }

  /** Answer the next `count` API calls with 429 `code` and `Retry-After: retryAfter`. */
  throttle(code = "rate_limited", retryAfter = 30, count = 1): void {
    for (let index = 0; index < count; index += 1) this.throttledAnswers.push([code, retryAfter]);
  }

  /** Publish the signed decision of a proposal; a waiting long poll answers at once. */
  decide(proposalId: string, token: string, state = "approved"): void {
    this.outcomeOf.set(proposalId, { token, state });
    this.wake(proposalId);
  }

  /** End a proposal without a decision ("expired", "cancelled", ...). */
  close(proposalId: string, state: string): void {
    this.outcomeOf.set(proposalId, { token: null, state });
    this.wake(proposalId);
  }

  consumesFor(jti: string): RecordedCall[] {
    return this.consumes.filter((call) => call.jti === jti);
  }

  outcomesFor(jti: string): string[] {
    return this.outcomes.filter((call) => call.jti === jti).map((call) => String(call.body.status));
  }

  private wake(proposalId: string): void {
    for (const wake of this.waiters.get(proposalId) ?? []) wake();
    this.waiters.delete(proposalId);
  }

  private send(response: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
    const payload = JSON.stringify(body);
    response.writeHead(status, { "Content-Type": "application/json", ...headers });
    response.end(payload);
  }

  private unavailable(response: ServerResponse): boolean {
    const throttled = this.throttledAnswers.shift();
    if (throttled) {
      const [code, retryAfter] = throttled;
      const message = `over a quota; retry after ${retryAfter} s`;
      this.send(response, 429, { error: { code, message, field: null } }, { "Retry-After": String(retryAfter) });
      return true;
    }
    if (this.overloadedAnswers > 0) {
      this.overloadedAnswers -= 1;
      this.send(response, 503, { error: { code: "overloaded", message: "at capacity", field: null } }, { "Retry-After": "0" });
      return true;
    }
    if (this.unavailableAnswers > 0) {
      this.unavailableAnswers -= 1;
      this.send(response, 503, { error: { code: "unavailable", message: "try again" } });
      return true;
    }
    return false;
  }

  private async pull(proposalId: string, wait: number): Promise<Outcome> {
    this.pulls.push(proposalId);
    if (!this.outcomeOf.has(proposalId) && wait > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, wait * 1000);
        const wake = () => {
          clearTimeout(timer);
          resolve();
        };
        this.waiters.set(proposalId, [...(this.waiters.get(proposalId) ?? []), wake]);
      });
    }
    return this.outcomeOf.get(proposalId) ?? { token: null, state: "awaiting_review" };
  }

  private async handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const url = new URL(request.url ?? "/", "http://fake");
    if (request.method === "GET") {
      const pull = PULL_PATH.exec(url.pathname);
      if (pull) {
        if (this.unavailable(response)) return;
        const proposalId = decodeURIComponent(pull[1] as string);
        const wait = Math.min(Number(url.searchParams.get("wait") ?? "0"), 60);
        const outcome = await this.pull(proposalId, wait);
        this.send(response, 200, { ...outcome, proposal_id: proposalId });
      } else if (url.pathname === "/.well-known/jwks.json") {
        this.jwksFetches += 1;
        this.send(response, 200, { keys: this.keys.map((key) => key.jwk()) });
      } else {
        this.send(response, 404, { error: { code: "not_found", message: url.pathname } });
      }
      return;
    }
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString("utf8");
    const body = (text ? JSON.parse(text) : {}) as JsonObject;
    const recorded: RecordedCall = {
      body,
      authorization: request.headers.authorization,
      prefer: request.headers.prefer as string | undefined,
    };
    if (this.unavailable(response)) return;
    if (url.pathname === "/api/v1/proposals") {
      const submitted = (body.request ?? {}) as JsonObject;
      const key = `${String(body.task_id)}\u0000${String(submitted.request_id)}`;
      this.proposals.push(recorded);
      const known = this.proposalIds.has(key);
      const proposalId = this.proposalIds.get(key) ?? randomUUID();
      this.proposalIds.set(key, proposalId);
      let applied = false;
      if (!known && this.intakeDecision) {
        const decided = await this.intakeDecision(body);
        if (decided) {
          applied = decided[1] === "allowed" && this.consumeAtIntake && preferenceNames(recorded.prefer).has("consume");
          if (applied) this.consumedAtIntake.push(proposalId);
          this.outcomeOf.set(proposalId, { token: decided[0], state: applied ? "executing" : decided[1] });
        }
      }
      const outcome = this.outcomeOf.get(proposalId);
      this.send(
        response,
        known ? 200 : 201,
        {
          proposal_id: proposalId,
          state: outcome?.state ?? "awaiting_review",
          status_url: `/api/v1/proposals/${proposalId}`,
          token: outcome?.token ?? null,
        },
        applied ? { "Preference-Applied": "consume" } : {},
      );
      if (!known) this.onProposal?.(body, proposalId);
      return;
    }
    const match = DECISION_PATH.exec(url.pathname);
    if (!match) {
      this.send(response, 404, { error: { code: "not_found", message: url.pathname } });
      return;
    }
    const jti = decodeURIComponent(match[1] as string);
    recorded.jti = jti;
    if (match[2] === "consume") {
      this.consumes.push(recorded);
      const [status, answer] = this.consumeAnswers.get(jti) ?? [200, { state: "executing" }];
      this.send(response, status, answer);
    } else {
      this.outcomes.push(recorded);
      this.send(response, 200, { state: body.status });
    }
  }
}

export interface DecideOptions {
  audience: string;
  decision?: string;
  reason?: string;
  consume?: boolean;
  /** Claims replacing the bound ones (e.g. another action_digest, to test a refusal). */
  overrides?: JsonObject;
}

/** Claims bound to a submitted body; an approval ends no later than the request's own expires_at. */
async function signedFor(reviewer: FakeReviewer, key: ReviewerKey, body: JsonObject, options: DecideOptions): Promise<string> {
  const request = body.request as JsonObject;
  const claims = decisionClaims({
    issuer: reviewer.url,
    audience: options.audience,
    taskId: String(body.task_id),
    requestId: String(request.request_id),
    actionDigest: String(request.action_digest),
    contextId: String(body.context_id ?? ""),
    decision: options.decision ?? "approved",
    reason: options.reason ?? "",
    consume: options.consume ?? true,
    overrides: options.overrides ?? {},
  });
  if (typeof request.expires_at === "string") {
    claims.exp = Math.min(Number(claims.exp), Math.floor(Date.parse(request.expires_at) / 1000));
  }
  return key.sign(claims);
}

/**
 * Policy deciding at intake: every new proposal's answer carries its signed decision (`approved` is
 * Reviewer's state `allowed`, `rejected` is `denied`).
 */
export function decideAtIntake(reviewer: FakeReviewer, key: ReviewerKey, options: DecideOptions): void {
  reviewer.intakeDecision = async (body) => [
    await signedFor(reviewer, key, body, options),
    (options.decision ?? "approved") === "approved" ? "allowed" : "denied",
  ];
}

/**
 * A reviewer deciding the next new proposal once it is recorded (or closing it: `close: "expired"`).
 * Resolves with the signed token (null when closed) after publishing it.
 */
export function decideNextProposal(
  reviewer: FakeReviewer,
  key: ReviewerKey,
  options: DecideOptions & { close?: string },
): Promise<string | null> {
  return new Promise((resolve, reject) => {
    reviewer.onProposal = (body, proposalId) => {
      reviewer.onProposal = null;
      if (options.close) {
        reviewer.close(proposalId, options.close);
        resolve(null);
        return;
      }
      signedFor(reviewer, key, body, options).then((token) => {
        reviewer.decide(proposalId, token);
        resolve(token);
      }, reject);
    };
  });
}
