/**
 * The agent's side of the OAuth Transaction Authorization Challenge (draft-rosomakho-oauth-txn-challenge-00),
 * the twin of the Python package's reviewer_gate.tac: a `fetch` that meets a protected resource's
 * challenge with Reviewer's approval, so a TypeScript agent needs one line.
 *
 *     const fetch = transactionAuthorizedFetch({ reviewerUrl, clientId: "refund-bot", clientSecret: API_TOKEN });
 *     const answer = await fetch("https://refunds.example.com/refunds", { method: "POST", body });
 *
 * On every request it sends `Accept-Txn-Challenge: ?1`. When the answer is a `401` whose
 * `WWW-Authenticate` carries `error="transaction_authorization_required"` and a
 * `transaction_challenge`, it
 *
 * 1. checks the challenge is meant for this Reviewer (`aud`) and not expired (the signature is
 *    Reviewer's to check: the agent does not hold the resource's keys);
 * 2. relays it unchanged to Reviewer's transaction authorization endpoint, authenticated as the
 *    agent's own registration (`clientId` = its slug, the secret = its API token, HTTP Basic);
 * 3. polls with the `transaction_authorization_id`, waiting `interval` seconds between polls (5 more
 *    after each `slow_down`, double after a connection failure), until a token, a refusal, the
 *    transaction's `expires_in` or `maxWaitSeconds`;
 * 4. sends the original request once more with `Authorization: Bearer <access token>`.
 *
 * A denial, an expiry or a refused challenge rejects with `TransactionAuthorizationError` (`error`, the
 * OAuth error code; `description`); the original request is not sent again. Any other answer passes
 * through untouched, and so does the retried request's: the resource decides whether the token
 * releases this exact operation. Docs: docs/protect-an-api.md in Reviewer's repository.
 */
import { decodeJwt } from "jose";

export const ENDPOINT_PATH = "/oauth/txn-authorization";
export const ACCEPT_HEADER = "Accept-Txn-Challenge";
const REQUIRED = "transaction_authorization_required";
const DEFAULT_INTERVAL_SECONDS = 5;
const SLOW_DOWN_STEP_SECONDS = 5;
const LEEWAY_SECONDS = 30;

// One auth-param of a WWW-Authenticate value: name=token or name="quoted string" (RFC 9110 §11.2).
const AUTH_PARAM = /([A-Za-z0-9_!#$%&'*+.^`|~-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,"]+))/g;

/** Reviewer (or this client) refused: `error` is the OAuth error code, `description` says why. */
export class TransactionAuthorizationError extends Error {
  constructor(
    readonly error: string,
    readonly description = "",
  ) {
    super(description ? `${error}: ${description}` : error);
    this.name = "TransactionAuthorizationError";
  }
}

/** The transaction challenge a resource's answer carries, or null when it carries none. */
export function challengeOf(response: Response): string | null {
  if (response.status !== 401) return null;
  // Headers joins repeated WWW-Authenticate values with ", "; the params are read across all of them.
  const value = response.headers.get("www-authenticate") ?? "";
  const params = new Map<string, string>();
  for (const match of value.matchAll(AUTH_PARAM)) {
    const name = (match[1] as string).toLowerCase();
    if (!params.has(name)) params.set(name, (match[2] ?? match[3] ?? "").replace(/\\(.)/g, "$1"));
  }
  if (params.get("error") !== REQUIRED) return null;
  return params.get("transaction_challenge") || null;
}

export interface TransactionAuthorizationOptions {
  /** Reviewer's base URL: its issuer (the challenge's `aud`) unless `issuer` says otherwise. */
  reviewerUrl: string;
  /** The agent's registration slug. */
  clientId: string;
  /** The agent's API token. */
  clientSecret: string;
  issuer?: string;
  /** Wait for people at most this long (15 minutes by default). */
  maxWaitSeconds?: number;
  /** The fetch to call the resource and Reviewer with (default: the global one). */
  fetch?: typeof fetch;
  /** How to wait between polls (tests pass a faster one). */
  sleep?: (seconds: number) => Promise<void>;
}

const defaultSleep = (seconds: number) => new Promise<void>((resolve) => setTimeout(resolve, seconds * 1000));

/** A `fetch` that meets transaction authorization challenges with Reviewer's approval. */
export function transactionAuthorizedFetch(options: TransactionAuthorizationOptions): typeof fetch {
  const authorization = new TransactionAuthorization(options);
  return (input, init) => authorization.fetch(input, init);
}

export class TransactionAuthorization {
  readonly endpoint: string;
  readonly issuer: string;
  readonly maxWaitSeconds: number;
  private readonly basic: string;
  private readonly send: typeof fetch;
  private readonly sleep: (seconds: number) => Promise<void>;

  constructor(options: TransactionAuthorizationOptions) {
    const base = options.reviewerUrl.replace(/\/+$/, "");
    this.endpoint = `${base}${ENDPOINT_PATH}`;
    this.issuer = (options.issuer ?? base).replace(/\/+$/, "");
    this.maxWaitSeconds = options.maxWaitSeconds ?? 900;
    // RFC 6749 §2.3.1: the id and the secret are form-urlencoded before they are joined.
    const pair = `${formEncode(options.clientId)}:${formEncode(options.clientSecret)}`;
    this.basic = `Basic ${Buffer.from(pair).toString("base64")}`;
    this.send = options.fetch ?? globalThis.fetch;
    this.sleep = options.sleep ?? defaultSleep;
  }

  async fetch(input: string | URL | Request, init?: RequestInit): Promise<Response> {
    const request = new Request(input, init);
    request.headers.set(ACCEPT_HEADER, "?1");
    const retry = request.clone(); // the body can be read once: keep a copy for the second send
    const response = await this.send(request);
    const challenge = challengeOf(response);
    if (challenge === null) return response;
    await response.body?.cancel();
    retry.headers.set("Authorization", `Bearer ${await this.authorize(challenge)}`);
    return this.send(retry);
  }

  /** Relay the challenge and wait for the access token. */
  async authorize(challenge: string): Promise<string> {
    this.check(challenge);
    const answer = await this.answer(await this.post({ transaction_challenge: challenge }));
    if (typeof answer.access_token === "string") return answer.access_token;
    const transactionId = answer.transaction_authorization_id;
    if (typeof transactionId !== "string") throw new TransactionAuthorizationError("server_error", "no transaction_authorization_id");
    let interval = typeof answer.interval === "number" ? answer.interval : DEFAULT_INTERVAL_SECONDS;
    const waits = Math.min(this.maxWaitSeconds, typeof answer.expires_in === "number" ? answer.expires_in : this.maxWaitSeconds);
    const deadline = performance.now() / 1000 + waits;
    for (;;) {
      if (performance.now() / 1000 + interval > deadline) {
        throw new TransactionAuthorizationError("expired_token", "no decision within the time allowed");
      }
      await this.sleep(interval);
      let response: Response;
      try {
        response = await this.post({ transaction_authorization_id: transactionId });
      } catch {
        interval *= 2; // the draft's §5.3: back off after a connection failure
        continue;
      }
      try {
        const token = (await this.answer(response)).access_token;
        if (typeof token === "string") return token;
        throw new TransactionAuthorizationError("server_error", "an answer with no access_token");
      } catch (error) {
        if (!(error instanceof TransactionAuthorizationError)) throw error;
        if (error.error === "authorization_pending") continue;
        if (error.error === "slow_down") {
          interval += SLOW_DOWN_STEP_SECONDS;
          continue;
        }
        throw error;
      }
    }
  }

  /** The draft's §4.5, as far as an agent without the resource's keys can: for this Reviewer, alive. */
  private check(challenge: string): void {
    let claims;
    try {
      claims = decodeJwt(challenge);
    } catch {
      throw new TransactionAuthorizationError("invalid_request", "the challenge is not a JWT");
    }
    const audiences = Array.isArray(claims.aud) ? claims.aud : [claims.aud];
    if (!audiences.includes(this.issuer)) {
      throw new TransactionAuthorizationError("invalid_request", `the challenge is for ${JSON.stringify(claims.aud)}, not for ${this.issuer}`);
    }
    if (typeof claims.exp !== "number" || claims.exp + LEEWAY_SECONDS < Date.now() / 1000) {
      throw new TransactionAuthorizationError("expired_token", "the challenge has expired");
    }
  }

  private post(form: Record<string, string>): Promise<Response> {
    return this.send(this.endpoint, {
      method: "POST",
      headers: { Authorization: this.basic, "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams(form).toString(),
    });
  }

  private async answer(response: Response): Promise<Record<string, unknown>> {
    let body: unknown;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    if (typeof body !== "object" || body === null || Array.isArray(body)) {
      throw new TransactionAuthorizationError("server_error", `Reviewer answered ${response.status}`);
    }
    const fields = body as Record<string, unknown>;
    if (response.status !== 200) {
      throw new TransactionAuthorizationError(String(fields.error ?? "server_error"), String(fields.error_description ?? ""));
    }
    return fields;
  }
}

/** application/x-www-form-urlencoded, as RFC 6749 §2.3.1 asks of the client id and secret. */
function formEncode(value: string): string {
  return new URLSearchParams({ v: value }).toString().slice(2);
}
