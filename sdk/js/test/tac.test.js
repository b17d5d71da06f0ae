// The TAC fetch wrapper against two loopback stand-ins: a protected resource that answers 401 with a
// challenge until it sees a bearer token, and Reviewer's transaction authorization endpoint (the
// wire contract of docs/protect-an-api.md: form posts, HTTP Basic, pending/slow_down/denied/token).
// Reviewer's real endpoint is exercised by the Python twin's end-to-end test; this checks what the
// TypeScript client sends and how it reacts.
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer } from "node:http";
import { afterEach, beforeEach, describe, it } from "node:test";

import { SignJWT, generateKeyPair } from "jose";

import { TransactionAuthorizationError, challengeOf, transactionAuthorizedFetch } from "@reviewer/gate";

const { privateKey } = await generateKeyPair("EdDSA", { crv: "Ed25519" });

async function listen(handler) {
  const server = createServer(async (request, response) => {
    const chunks = [];
    for await (const chunk of request) chunks.push(chunk);
    await handler(request, Buffer.concat(chunks).toString(), response);
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return { server, url: `http://127.0.0.1:${server.address().port}` };
}

let reviewer;
let resource;
let relayed; // what the stand-in Reviewer received
let served; // what the resource received
let answers; // the stand-in Reviewer's answers, in order

async function challenge({ audience = reviewer.url, expiresIn = 300 } = {}) {
  return new SignJWT({ txn: "txn-1", authorization_details: [{ type: "refund", amount: "740.00" }], act: { sub: "bot" } })
    .setProtectedHeader({ alg: "EdDSA", typ: "txn-authz-challenge+jwt" })
    .setIssuer("https://refunds.example")
    .setAudience(audience)
    .setIssuedAt()
    .setExpirationTime(Math.floor(Date.now() / 1000) + expiresIn)
    .setJti(crypto.randomUUID())
    .sign(privateKey);
}

beforeEach(async () => {
  relayed = [];
  served = [];
  answers = [];
  reviewer = await listen((request, body, response) => {
    relayed.push({ authorization: request.headers.authorization, form: Object.fromEntries(new URLSearchParams(body)), path: request.url });
    const [status, answer] = answers.shift() ?? [500, { error: "server_error" }];
    response.writeHead(status, { "Content-Type": "application/json" }).end(JSON.stringify(answer));
  });
  const signed = await challenge();
  resource = await listen((request, body, response) => {
    served.push({ authorization: request.headers.authorization, accept: request.headers["accept-txn-challenge"], body });
    if (request.headers.authorization === "Bearer the-token") {
      response.writeHead(200, { "Content-Type": "application/json" }).end(JSON.stringify({ refunded: JSON.parse(body).amount }));
      return;
    }
    resource.sent = resource.challenge ?? signed;
    response
      .writeHead(401, {
        "WWW-Authenticate": `Bearer error="transaction_authorization_required", error_description="Approval is required", transaction_challenge="${resource.sent}"`,
      })
      .end();
  });
});
afterEach(() => {
  reviewer.server.close();
  resource.server.close();
});

const noWait = async () => {};

function client(options = {}) {
  return transactionAuthorizedFetch({ reviewerUrl: reviewer.url, clientId: "refund bot", clientSecret: "s3cr:t", sleep: noWait, ...options });
}

describe("transactionAuthorizedFetch", () => {
  it("relays the challenge unchanged, polls while pending, and sends the request once more with the token", async () => {
    answers.push([200, { transaction_authorization_id: "t-1", interval: 5, expires_in: 600 }], [400, { error: "authorization_pending" }], [200, { access_token: "the-token", token_type: "Bearer" }]);

    const answer = await client()(`${resource.url}/refunds`, { method: "POST", body: JSON.stringify({ amount: "740.00" }) });

    assert.equal(answer.status, 200);
    assert.deepEqual(await answer.json(), { refunded: "740.00" });
    assert.equal(relayed[0].form.transaction_challenge, resource.sent, "relayed exactly as the resource sent it");
    assert.deepEqual(relayed.slice(1).map((call) => call.form), [{ transaction_authorization_id: "t-1" }, { transaction_authorization_id: "t-1" }]);
    // RFC 6749 §2.3.1: form-encoded id and secret inside HTTP Basic
    assert.equal(relayed[0].authorization, `Basic ${Buffer.from("refund+bot:s3cr%3At").toString("base64")}`);
    assert.equal(relayed[0].path, "/oauth/txn-authorization");
    assert.deepEqual(served.map((call) => [call.accept, call.authorization ?? null]), [["?1", null], ["?1", "Bearer the-token"]]);
    assert.equal(served[1].body, JSON.stringify({ amount: "740.00" }), "the retried request carries the same body");
  });

  it("waits five seconds more after each slow_down", async () => {
    const waits = [];
    answers.push([200, { transaction_authorization_id: "t-1", interval: 2, expires_in: 600 }], [400, { error: "slow_down" }], [400, { error: "authorization_pending" }], [200, { access_token: "the-token" }]);
    await client({ sleep: async (seconds) => waits.push(seconds) })(`${resource.url}/refunds`, { method: "POST", body: "{\"amount\":\"1\"}" });
    assert.deepEqual(waits, [2, 7, 7]);
  });

  it("answers at once when policy decided at intake", async () => {
    answers.push([200, { access_token: "the-token", token_type: "Bearer" }]);
    const answer = await client()(`${resource.url}/refunds`, { method: "POST", body: "{\"amount\":\"1\"}" });
    assert.equal(answer.status, 200);
    assert.equal(relayed.length, 1);
  });

  it("rejects with the OAuth error of a denial and never sends the request again", async () => {
    answers.push([200, { transaction_authorization_id: "t-1", interval: 1, expires_in: 600 }], [400, { error: "access_denied", error_description: "rejected: no proof of loss" }]);
    await assert.rejects(client()(`${resource.url}/refunds`, { method: "POST", body: "{}" }), (error) => {
      assert.ok(error instanceof TransactionAuthorizationError);
      assert.equal(error.error, "access_denied");
      assert.equal(error.description, "rejected: no proof of loss");
      return true;
    });
    assert.equal(served.length, 1);
  });

  it("refuses to relay a challenge meant for another authorization server", async () => {
    resource.challenge = await challenge({ audience: "https://other-reviewer.example" });
    await assert.rejects(client()(`${resource.url}/refunds`, { method: "POST", body: "{}" }), { error: "invalid_request" });
    assert.deepEqual(relayed, []);
  });

  it("refuses to relay an expired challenge", async () => {
    resource.challenge = await challenge({ expiresIn: -120 });
    await assert.rejects(client()(`${resource.url}/refunds`, { method: "POST", body: "{}" }), { error: "expired_token" });
    assert.deepEqual(relayed, []);
  });

  it("gives up when no decision comes within maxWaitSeconds", async () => {
    answers.push([200, { transaction_authorization_id: "t-1", interval: 5, expires_in: 600 }]);
    await assert.rejects(client({ maxWaitSeconds: 1 })(`${resource.url}/refunds`, { method: "POST", body: "{}" }), { error: "expired_token" });
  });
});

describe("challengeOf", () => {
  it("reads the challenge among other auth-params and challenges, and nothing from other answers", () => {
    const header = 'Basic realm="x", Bearer error="transaction_authorization_required", transaction_challenge="a.b.c"';
    assert.equal(challengeOf(new Response(null, { status: 401, headers: { "WWW-Authenticate": header } })), "a.b.c");
    assert.equal(challengeOf(new Response(null, { status: 401, headers: { "WWW-Authenticate": 'Bearer error="invalid_token"' } })), null);
    assert.equal(challengeOf(new Response(null, { status: 403, headers: { "WWW-Authenticate": header } })), null);
  });
});
