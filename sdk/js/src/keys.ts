/** Where the gate finds Reviewer's public keys: a JWKS held in memory, or fetched and cached. */
import { importJWK, type CryptoKey, type JWK } from "jose";

import { ALGORITHMS, isObject, type JsonObject } from "./decision.js";
import { GateError } from "./errors.js";

/** What jose verifies with: a WebCrypto key (jose's importJWK answers one on Node 20). */
export type PublicKey = CryptoKey | Uint8Array;

export interface KeySource {
  /** The public key named kid. Rejects with GateError ("unknown_kid", "keys_unavailable"). */
  keyFor(kid: string): Promise<PublicKey>;
}

/** The Ed25519 public key of one JWK, or null for a key this gate will never accept. */
async function publicKeyFromJwk(jwk: JsonObject): Promise<PublicKey | null> {
  if (jwk.kty !== "OKP" || jwk.crv !== "Ed25519" || "d" in jwk) return null;
  if (!(jwk.use === undefined || jwk.use === "sig")) return null;
  if (!(jwk.alg === undefined || ALGORITHMS.includes(jwk.alg as string))) return null;
  if (typeof jwk.x !== "string") return null;
  try {
    return (await importJWK({ kty: "OKP", crv: "Ed25519", x: jwk.x } as JWK, "EdDSA")) as PublicKey;
  } catch {
    return null;
  }
}

async function keysByKid(jwks: unknown): Promise<Map<string, PublicKey>> {
  const keys = new Map<string, PublicKey>();
  const entries = isObject(jwks) && Array.isArray(jwks.keys) ? jwks.keys : [];
  for (const jwk of entries) {
    if (!isObject(jwk) || typeof jwk.kid !== "string") continue;
    const key = await publicKeyFromJwk(jwk);
    if (key !== null) keys.set(jwk.kid, key);
  }
  return keys;
}

/** Keys from a JWKS document held in memory (tests, or keys pinned in configuration). */
export class StaticKeySource implements KeySource {
  private readonly keys: Promise<Map<string, PublicKey>>;

  constructor(jwks: JsonObject) {
    this.keys = keysByKid(jwks);
  }

  async keyFor(kid: string): Promise<PublicKey> {
    const key = (await this.keys).get(kid);
    if (key === undefined) throw new GateError("unknown_kid", `no Ed25519 key with kid ${JSON.stringify(kid)}`);
    return key;
  }
}

export type JwksFetch = (url: string, timeoutSeconds: number) => Promise<unknown>;

async function fetchJwksOverHttp(url: string, timeoutSeconds: number): Promise<unknown> {
  const response = await fetch(url, {
    headers: { Accept: "application/json" },
    signal: AbortSignal.timeout(timeoutSeconds * 1000),
  });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  const document: unknown = await response.json();
  return isObject(document) ? document : {}; // a JWKS that is no object holds no keys
}

export interface JWKSKeySourceOptions {
  cacheSeconds?: number;
  timeoutSeconds?: number;
  minRefreshSeconds?: number;
  fetch?: JwksFetch;
}

/**
 * Keys from Reviewer's `/.well-known/jwks.json`, cached for `cacheSeconds` (300).
 *
 * An unknown kid triggers one refresh (Reviewer may have rotated its key) and is refused if still
 * unknown. Refreshes for unknown kids are at most one per `minRefreshSeconds` (10), so a stream of forged
 * tokens with random kids cannot turn this agent into a JWKS request amplifier. A JWKS that cannot be
 * fetched fails closed (`keys_unavailable`).
 */
export class JWKSKeySource implements KeySource {
  readonly jwksUrl: string;
  readonly cacheSeconds: number;
  readonly timeoutSeconds: number;
  readonly minRefreshSeconds: number;
  fetchCount = 0;
  private readonly fetchJwks: JwksFetch;
  private keys = new Map<string, PublicKey>();
  private fetchedAt: number | null = null;
  private queue: Promise<unknown> = Promise.resolve(); // one lookup at a time, as the Python lock

  constructor(jwksUrl: string, options: JWKSKeySourceOptions = {}) {
    this.jwksUrl = jwksUrl;
    this.cacheSeconds = options.cacheSeconds ?? 300;
    this.timeoutSeconds = options.timeoutSeconds ?? 5;
    this.minRefreshSeconds = options.minRefreshSeconds ?? 10;
    this.fetchJwks = options.fetch ?? fetchJwksOverHttp;
  }

  private async refresh(): Promise<void> {
    this.fetchCount += 1;
    let document: unknown;
    try {
      document = await this.fetchJwks(this.jwksUrl, this.timeoutSeconds);
    } catch (error) {
      // any transport or parse error: refuse rather than guess
      throw new GateError("keys_unavailable", `cannot fetch JWKS from ${this.jwksUrl}: ${String(error)}`);
    }
    this.keys = await keysByKid(document);
    this.fetchedAt = performance.now() / 1000;
  }

  private async lookup(kid: string): Promise<PublicKey> {
    const now = performance.now() / 1000;
    const fetchedAt = this.fetchedAt;
    if (fetchedAt === null || now - fetchedAt >= this.cacheSeconds) {
      await this.refresh();
    } else if (!this.keys.has(kid) && now - fetchedAt >= this.minRefreshSeconds) {
      await this.refresh(); // the one refresh an unknown kid gets
    }
    const key = this.keys.get(kid);
    if (key === undefined) {
      throw new GateError("unknown_kid", `no Ed25519 key with kid ${JSON.stringify(kid)} in ${this.jwksUrl}`);
    }
    return key;
  }

  keyFor(kid: string): Promise<PublicKey> {
    const result = this.queue.then(() => this.lookup(kid));
    this.queue = result.catch(() => undefined);
    return result;
  }
}
