// The gate beyond the shared vectors: the leeway against the real clock, what a refusal leaves unused,
// the key sources, the used stores, consume and outcome against a fake Reviewer.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";

import {
  FileUsedStore,
  Gate,
  GateError,
  JWKSKeySource,
  MemoryUsedStore,
  StaticKeySource,
  actionDigest,
  decisionTokenFromMetadata,
  approvalRequestMetadata,
  EXTENSION_URI,
} from "@reviewer/gate";
import { FakeReviewer, ReviewerKey, decisionClaims } from "@reviewer/gate/testing";

const ISSUER = "https://reviewer.example";
const AUDIENCE = "urn:agent:refunds";
const ACTION = { tool: "payments.refund", arguments: { order_id: "1182", amount: "40.00", currency: "EUR" } };
const DIGEST = actionDigest(ACTION);
const BINDING = { taskId: "task-1", requestId: "request-1", actionDigest: DIGEST };

const key = await ReviewerKey.create();

function claims(options = {}) {
  return decisionClaims({ issuer: ISSUER, audience: AUDIENCE, ...BINDING, ...options });
}

function gateWith(options = {}) {
  return new Gate({
    issuer: ISSUER,
    audience: AUDIENCE,
    keys: new StaticKeySource({ keys: [key.jwk()] }),
    usedStore: new MemoryUsedStore(),
    ...options,
  });
}

async function refusedCode(promise) {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof GateError, String(error));
    return error.code;
  }
  assert.fail("verified");
}

const now = () => Math.floor(Date.now() / 1000);

describe("verify", () => {
  it("verifies an approval and carries its claims", async () => {
    const signed = claims();
    const decision = await gateWith().verify(await key.sign(signed), BINDING);
    assert.equal(decision.approved, true);
    assert.deepEqual([decision.jti, decision.taskId, decision.requestId], [signed.jti, "task-1", "request-1"]);
    assert.deepEqual([decision.actionDigest, decision.rev, decision.consume], [DIGEST, 2, true]);
    assert.equal(decision.expiresAt, signed.exp);
    assert.deepEqual(decision.policy, { id: "refunds", version: 3 });
    assert.deepEqual(decision.policies, [{ id: "refunds", version: 3 }]);
    assert.equal(decision.tenant, "acme");
    assert.equal(decision.proposalId, signed.proposal_id);
  });

  it("grants the leeway on exp, and no more", async () => {
    const gate = gateWith();
    const within = await key.sign(claims({ now: now() - 610, lifetime: 600 })); // expired 10 s ago
    assert.equal((await gate.verify(within, BINDING)).approved, true);
    const beyond = await key.sign(claims({ now: now() - 700, lifetime: 600 })); // expired 100 s ago
    assert.equal(await refusedCode(gate.verify(beyond, BINDING)), "expired");
    const soon = await key.sign(claims({ overrides: { nbf: now() + 20 } })); // valid in 20 s
    assert.equal((await gate.verify(soon, BINDING)).approved, true);
  });

  it("does not use up a decision it refuses", async () => {
    const store = new MemoryUsedStore();
    const signed = claims({ overrides: { tenant: "acme" } });
    const token = await key.sign(signed);
    assert.equal(await refusedCode(gateWith({ usedStore: store, tenant: "globex" }).verify(token, BINDING)), "wrong_tenant");
    assert.equal(store.claim(signed.jti, 0), true);
  });

  it("refuses to exist without an issuer or audience, or with an empty tenant", () => {
    for (const missing of [{ issuer: "" }, { issuer: undefined }, { audience: "" }, { tenant: "" }]) {
      assert.throws(() => gateWith(missing), (error) => error instanceof GateError && error.code === "not_configured");
    }
  });

  it("refuses an expiresAt without a zone as not_configured", async () => {
    const token = await key.sign(claims());
    assert.equal(
      await refusedCode(gateWith().verify(token, { ...BINDING, expiresAt: "2099-01-01T00:00:00" })),
      "not_configured",
    );
  });
});

describe("JWKS key source", () => {
  let reviewer;
  before(async () => {
    reviewer = await new FakeReviewer([key]).start();
  });
  after(() => reviewer.stop());

  it("refreshes once on an unknown kid, then refuses", async () => {
    const keys = new JWKSKeySource(`${reviewer.url}/.well-known/jwks.json`, { minRefreshSeconds: 0 });
    await keys.keyFor(key.kid);
    const fetched = reviewer.jwksFetches;
    assert.equal(await refusedCode(keys.keyFor("ed25519-nobody")), "unknown_kid");
    assert.equal(reviewer.jwksFetches, fetched + 1);
  });

  it("finds a rotated key with that refresh", async () => {
    const keys = new JWKSKeySource(`${reviewer.url}/.well-known/jwks.json`, { minRefreshSeconds: 0 });
    await keys.keyFor(key.kid);
    const rotated = await ReviewerKey.create();
    reviewer.keys.push(rotated);
    try {
      const gate = gateWith({ keys });
      assert.equal((await gate.verify(await rotated.sign(claims()), BINDING)).approved, true);
    } finally {
      reviewer.keys.pop();
    }
  });

  it("does not refetch in a loop for unknown kids", async () => {
    const keys = new JWKSKeySource(`${reviewer.url}/.well-known/jwks.json`, { minRefreshSeconds: 3600 });
    await keys.keyFor(key.kid);
    for (let index = 0; index < 5; index += 1) {
      assert.equal(await refusedCode(keys.keyFor(`ed25519-random-${index}`)), "unknown_kid");
    }
    assert.equal(keys.fetchCount, 1);
  });

  it("fails closed when the JWKS cannot be fetched", async () => {
    const keys = new JWKSKeySource("http://127.0.0.1:9/.well-known/jwks.json", { timeoutSeconds: 2 });
    assert.equal(await refusedCode(gateWith({ keys }).verify(await key.sign(claims()), BINDING)), "keys_unavailable");
  });

  it("takes an injected fetch function, and ignores keys that are not Ed25519 public keys", async () => {
    const urls = [];
    const keys = new JWKSKeySource("https://reviewer.example/jwks", {
      fetch: async (url) => {
        urls.push(url);
        return { keys: [{ ...key.jwk(), kid: "with-d", d: "AAAA" }, { ...key.jwk(), kid: "rsa", kty: "RSA" }, key.jwk()] };
      },
    });
    await keys.keyFor(key.kid);
    assert.equal(await refusedCode(keys.keyFor("with-d")), "unknown_kid");
    assert.deepEqual(urls, ["https://reviewer.example/jwks"]);
  });
});

describe("used stores", () => {
  it("a FileUsedStore lets a decision be claimed once across two stores on one directory", async () => {
    const directory = mkdtempSync(join(tmpdir(), "reviewer-gate-test-"));
    const exp = now() + 600;
    assert.equal(await new FileUsedStore(directory).claim("jti-1", exp), true);
    assert.equal(await new FileUsedStore(directory).claim("jti-1", exp), false);
    assert.equal(await new FileUsedStore(directory).claim("jti-2", exp), true);
  });

  it("a FileUsedStore has one winner when processes race", async () => {
    const directory = mkdtempSync(join(tmpdir(), "reviewer-gate-race-"));
    const claimant = `
      import { FileUsedStore } from "@reviewer/gate";
      const store = new FileUsedStore(process.argv[1]);
      process.stdout.write(String(await store.claim("the-jti", ${now() + 600})));
    `;
    const run = promisify(execFile);
    const answers = await Promise.all(
      Array.from({ length: 6 }, () =>
        run(process.execPath, ["--input-type=module", "-e", claimant, directory], { cwd: import.meta.dirname }),
      ),
    );
    assert.deepEqual(answers.map(({ stdout }) => stdout).sort(), ["false", "false", "false", "false", "false", "true"]);
  });

  it("two gates sharing a FileUsedStore directory act on a decision once", async () => {
    const directory = mkdtempSync(join(tmpdir(), "reviewer-gate-share-"));
    const token = await key.sign(claims());
    const first = gateWith({ usedStore: new FileUsedStore(directory) });
    const second = gateWith({ usedStore: new FileUsedStore(directory) });
    const results = await Promise.allSettled([first.verify(token, BINDING), second.verify(token, BINDING)]);
    assert.deepEqual(
      results.map((result) => (result.status === "fulfilled" ? "verified" : result.reason.code)).sort(),
      ["replayed", "verified"],
    );
  });
});

describe("consume and outcome", () => {
  let reviewer;
  before(async () => {
    reviewer = await new FakeReviewer([key]).start();
  });
  after(() => reviewer.stop());

  const talking = (options = {}) => gateWith({ reviewerUrl: reviewer.url, apiToken: "agent-token", ...options });

  async function verified(gate, options = {}) {
    return gate.verify(await key.sign(claims(options)), BINDING);
  }

  it("returns when Reviewer answers 200, sending the rev and the API token", async () => {
    const gate = talking();
    const decision = await verified(gate);
    await gate.consume(decision);
    const [call] = reviewer.consumesFor(decision.jti);
    assert.deepEqual(call.body, { rev: 2 });
    assert.equal(call.authorization, "Bearer agent-token");
  });

  it("rejects with Reviewer's 409 code", async () => {
    const gate = talking();
    const decision = await verified(gate);
    reviewer.consumeAnswers.set(decision.jti, [409, { error: { code: "revoked", message: "revoked by Rita" } }]);
    assert.equal(await refusedCode(gate.consume(decision)), "consume_refused:revoked");
  });

  it("names another refusal by its HTTP status", async () => {
    const gate = talking();
    const decision = await verified(gate);
    reviewer.consumeAnswers.set(decision.jti, [404, { error: { code: "not_found", message: "no" } }]);
    assert.equal(await refusedCode(gate.consume(decision)), "consume_refused:http_404");
  });

  it("treats a server error as reviewer_unreachable", async () => {
    const gate = talking();
    const decision = await verified(gate);
    reviewer.consumeAnswers.set(decision.jti, [500, { error: { code: "internal", message: "boom" } }]);
    assert.equal(await refusedCode(gate.consume(decision)), "reviewer_unreachable");
  });

  it("fails closed with Reviewer down", async () => {
    const gate = gateWith({ reviewerUrl: "http://127.0.0.1:9", httpTimeoutSeconds: 2 });
    assert.equal(await refusedCode(gate.consume(await verified(gate))), "reviewer_unreachable");
  });

  it("never consumes a rejection", async () => {
    const gate = talking();
    const decision = await verified(gate, { decision: "rejected", consume: false });
    assert.equal(await refusedCode(gate.consume(decision)), "consume_refused:not_approved");
    assert.deepEqual(reviewer.consumesFor(decision.jti), []);
  });

  it("waits out an overloaded Reviewer for a consume, not another 503", async () => {
    const gate = talking();
    const decision = await verified(gate);
    reviewer.overloadedAnswers = 2;
    await gate.consume(decision);
    assert.equal(reviewer.consumesFor(decision.jti).length, 1);
    const other = await verified(gate);
    reviewer.unavailableAnswers = 1;
    assert.equal(await refusedCode(gate.consume(other)), "reviewer_unreachable");
  });

  it("reports an outcome, best effort", async () => {
    const gate = talking();
    const decision = await verified(gate);
    assert.equal(await gate.reportOutcome(decision, "succeeded", { transactionId: "tx-1" }), true);
    assert.deepEqual(reviewer.outcomesFor(decision.jti), ["succeeded"]);
    const down = gateWith({ reviewerUrl: "http://127.0.0.1:9", httpTimeoutSeconds: 2 });
    assert.equal(await down.reportOutcome(decision, "failed"), false);
  });
});

describe("A2A metadata", () => {
  it("reads the decision from the extension's key only", () => {
    assert.equal(decisionTokenFromMetadata({ [EXTENSION_URI]: { decision: "a.b.c" } }), "a.b.c");
    assert.equal(decisionTokenFromMetadata({ decision: "a.b.c" }), null);
    assert.equal(decisionTokenFromMetadata(null), null);
  });

  it("puts the request under the extension's key", () => {
    assert.deepEqual(approvalRequestMetadata({ request_id: "r" }), { [EXTENSION_URI]: { request: { request_id: "r" } } });
  });
});
