// ReviewerClient against the fake Reviewer (real Ed25519 keys, real HTTP on loopback): submit, the
// decision in the intake answer, the long poll, verify, consume, report, retries and throttling.
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, it } from "node:test";

import {
  FileUsedStore,
  NotApproved,
  ReviewerClient,
  ReviewerUnavailable,
  Throttled,
  actionDigest,
  buildRequest,
  currentApproval,
  runningUnder,
} from "@reviewer/gate";
import { FakeReviewer, ReviewerKey, decideAtIntake, decideNextProposal, decisionClaims } from "@reviewer/gate/testing";

const AUDIENCE = "https://agent.example";
const ACTION = { tool: "payments.refund", arguments: { order_id: "1182", amount: "40.00", currency: "EUR" } };
const PRINCIPAL = { id: "u-7", display: "Casey" };
// Every wait below has a deadline: a broken test fails with "timeout" instead of hanging.
const DEADLINE = { timeoutSeconds: 20 };

const key = await ReviewerKey.create();
let reviewer;
let client;

function clientFor(options = {}) {
  return new ReviewerClient({
    reviewerUrl: reviewer.url,
    apiToken: "agent-token",
    audience: AUDIENCE,
    backoffSeconds: 0.01,
    usedStore: new FileUsedStore(mkdtempSync(join(tmpdir(), "reviewer-gate-client-"))),
    ...options,
  });
}

async function notApproved(promise) {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof NotApproved, String(error));
    return error;
  }
  assert.fail("approved");
}

beforeEach(async () => {
  reviewer = await new FakeReviewer([key]).start();
  client = clientFor();
});
afterEach(() => reviewer.stop());

describe("requestApproval", () => {
  it("submits, waits, verifies, consumes and reports", async () => {
    decideNextProposal(reviewer, key, { audience: AUDIENCE });
    const approval = await client.requestApproval(ACTION, { summary: "Refund EUR 40.00", principal: PRINCIPAL, ttlSeconds: 60, ...DEADLINE });

    const [submitted] = reviewer.proposals;
    assert.equal(reviewer.proposals.length, 1);
    assert.equal(submitted.authorization, "Bearer agent-token");
    assert.equal(submitted.prefer, "decision-in-answer, consume");
    assert.equal(submitted.body.request.action_digest, actionDigest(ACTION));
    assert.match(submitted.body.request.expires_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.ok(reviewer.pulls.length >= 1); // the decision came by the long poll
    assert.deepEqual(approval.action, ACTION);
    assert.equal(approval.edited, false);
    assert.deepEqual(reviewer.consumesFor(approval.idempotencyKey).map((call) => call.body), [{ rev: 2 }]);
    assert.equal(await approval.report("succeeded", { transactionId: "tx-1" }), true);
    assert.deepEqual(reviewer.outcomesFor(approval.idempotencyKey), ["succeeded"]);
  });

  it("acts on an approval consumed at intake with no pull and no consume", async () => {
    decideAtIntake(reviewer, key, { audience: AUDIENCE });
    const approval = await client.requestApproval(ACTION, { summary: "Refund", principal: PRINCIPAL, ...DEADLINE });
    assert.deepEqual([reviewer.pulls, reviewer.consumes], [[], []]);
    assert.equal(reviewer.consumedAtIntake.length, 1);
    assert.equal(approval.decision.approved, true);
    assert.deepEqual([approval.submission.consumed, approval.submission.state], [true, "executing"]);
    assert.equal(await approval.report("succeeded"), true);
    assert.deepEqual(reviewer.outcomesFor(approval.idempotencyKey), ["succeeded"]);
  });

  it("consumes the decision in the intake answer when Reviewer did not", async () => {
    reviewer.consumeAtIntake = false; // a Reviewer that predates the preference ignores it
    decideAtIntake(reviewer, key, { audience: AUDIENCE });
    const approval = await client.requestApproval(ACTION, { summary: "Refund", principal: PRINCIPAL, ...DEADLINE });
    assert.deepEqual(reviewer.pulls, []);
    assert.equal(approval.submission.consumed, false);
    assert.deepEqual(reviewer.consumesFor(approval.idempotencyKey).map((call) => call.body), [{ rev: 2 }]);
  });

  it("verifies a token consumed at intake before acting", async () => {
    const other = actionDigest({ ...ACTION, arguments: { ...ACTION.arguments, amount: "4000.00" } });
    decideAtIntake(reviewer, key, { audience: AUDIENCE, overrides: { action_digest: other } });
    const refusal = await notApproved(client.requestApproval(ACTION, { summary: "Refund", principal: PRINCIPAL, ...DEADLINE }));
    assert.equal(refusal.code, "wrong_digest");
    assert.deepEqual([reviewer.consumedAtIntake.length, reviewer.consumes], [1, []]);
  });

  it("releases nothing on a replay of a request consumed at intake", async () => {
    decideAtIntake(reviewer, key, { audience: AUDIENCE });
    const request = buildRequest(ACTION, { summary: "Refund", principal: PRINCIPAL });
    const first = await client.submit(request, { taskId: "task-lost", consume: true });
    const jti = JSON.parse(Buffer.from(first.token.split(".")[1], "base64url").toString()).jti;
    reviewer.consumeAnswers.set(jti, [409, { error: { code: "consumed", message: "spent" } }]);

    const again = await client.submit(request, { taskId: "task-lost", consume: true });

    assert.deepEqual([first.consumed, again.consumed, again.token === first.token], [true, false, true]);
    const refusal = await notApproved(client.release(again, again.token));
    assert.equal(refusal.code, "consume_refused:consumed");
  });

  it("rejects a denial in the intake answer without a pull or a consume", async () => {
    decideAtIntake(reviewer, key, { audience: AUDIENCE, decision: "rejected", reason: "policy says no", consume: false });
    const refusal = await notApproved(client.requestApproval(ACTION, { summary: "Refund", principal: PRINCIPAL, ...DEADLINE }));
    assert.deepEqual([refusal.code, refusal.reason], ["rejected", "policy says no"]);
    assert.deepEqual([reviewer.pulls, reviewer.consumes], [[], []]);
  });

  it("refuses a forged token in the intake answer like a pulled one", async () => {
    const other = actionDigest({ ...ACTION, arguments: { ...ACTION.arguments, amount: "4000.00" } });
    decideAtIntake(reviewer, key, { audience: AUDIENCE, overrides: { action_digest: other } });
    const refusal = await notApproved(client.requestApproval(ACTION, { summary: "Refund", principal: PRINCIPAL, ...DEADLINE }));
    assert.equal(refusal.code, "wrong_digest");
    assert.deepEqual(reviewer.consumes, []);
  });

  it("names its registration and refuses another tenant's decision", async () => {
    const globex = clientFor({ tenant: "globex", agent: "globex-refunds" });
    decideNextProposal(reviewer, key, { audience: AUDIENCE }); // signed for tenant acme
    const refusal = await notApproved(globex.requestApproval(ACTION, { summary: "Refund", principal: PRINCIPAL, ...DEADLINE }));
    assert.equal(refusal.code, "wrong_tenant");
    assert.equal(reviewer.proposals[0].body.request.agent, "globex-refunds");
    assert.deepEqual(reviewer.consumes, []);
  });

  it("rejects with the reviewer's reason and consumes nothing", async () => {
    decideNextProposal(reviewer, key, { audience: AUDIENCE, decision: "rejected", reason: "not a duplicate", consume: false });
    const refusal = await notApproved(client.requestApproval(ACTION, { summary: "Refund", principal: PRINCIPAL, ...DEADLINE }));
    assert.deepEqual([refusal.code, refusal.reason], ["rejected", "not a duplicate"]);
    assert.ok(refusal.decision);
    assert.deepEqual(reviewer.consumes, []);
  });

  it("rejects a proposal that closed without a decision", async () => {
    decideNextProposal(reviewer, key, { audience: AUDIENCE, close: "expired" });
    const refusal = await notApproved(client.requestApproval(ACTION, { summary: "Refund", principal: PRINCIPAL, ...DEADLINE }));
    assert.equal(refusal.code, "expired");
  });

  it("gives up at the caller's deadline", async () => {
    const patient = clientFor({ pollSeconds: 0 });
    const refusal = await notApproved(patient.requestApproval(ACTION, { summary: "Refund", principal: PRINCIPAL, timeoutSeconds: 0 }));
    assert.equal(refusal.code, "timeout");
  });

  it("calls onWait between long polls until the decision comes", async () => {
    const patient = clientFor({ pollSeconds: 0 });
    const waits = [];
    let proposalId = null;
    reviewer.onProposal = (_body, id) => {
      proposalId = id;
    };
    const approval = await patient.requestApproval(ACTION, {
      summary: "Refund",
      principal: PRINCIPAL,
      ...DEADLINE,
      onWait: async (state) => {
        waits.push(state);
        if (waits.length === 2) {
          const [submitted] = reviewer.proposals;
          const token = await key.sign(
            decisionClaims({
              issuer: reviewer.url,
              audience: AUDIENCE,
              taskId: submitted.body.task_id,
              requestId: submitted.body.request.request_id,
              actionDigest: submitted.body.request.action_digest,
              contextId: "",
            }),
          );
          reviewer.decide(proposalId, token);
        }
      },
    });
    assert.equal(approval.decision.approved, true);
    assert.deepEqual(waits, ["awaiting_review", "awaiting_review"]);
  });

  it("refuses a consume Reviewer answers 409", async () => {
    decideNextProposal(reviewer, key, { audience: AUDIENCE, overrides: { jti: "jti-revoked" } });
    reviewer.consumeAnswers.set("jti-revoked", [409, { error: { code: "revoked", message: "halted" } }]);
    const refusal = await notApproved(client.requestApproval(ACTION, { summary: "Refund", principal: PRINCIPAL, ...DEADLINE }));
    assert.equal(refusal.code, "consume_refused:revoked");
  });

  it("executes a reviewer's edit, never the original", async () => {
    const edited = { ...ACTION, arguments: { ...ACTION.arguments, amount: "25.00" } };
    reviewer.onProposal = async (body, proposalId) => {
      const claims = decisionClaims({
        issuer: reviewer.url,
        audience: AUDIENCE,
        taskId: body.task_id,
        requestId: "request-edited",
        actionDigest: actionDigest(edited),
        contextId: "",
        overrides: { replaces: [body.request.request_id], action: edited },
      });
      reviewer.decide(proposalId, await key.sign(claims));
    };
    const approval = await client.requestApproval(ACTION, { summary: "Refund", principal: PRINCIPAL, ...DEADLINE });
    assert.equal(approval.edited, true);
    assert.deepEqual(approval.action, edited);
  });

  it("a token used once cannot be released again", async () => {
    decideAtIntake(reviewer, key, { audience: AUDIENCE });
    const submission = await client.submit(buildRequest(ACTION, { summary: "Refund", principal: PRINCIPAL }));
    await client.release(submission, submission.token);
    const refusal = await notApproved(client.release(submission, submission.token));
    assert.equal(refusal.code, "replayed");
  });
});

describe("HTTP", () => {
  it("retries submit and pull on 503", async () => {
    reviewer.unavailableAnswers = 2;
    decideNextProposal(reviewer, key, { audience: AUDIENCE });
    const approval = await client.requestApproval(ACTION, { summary: "Refund", principal: PRINCIPAL, ...DEADLINE });
    assert.equal(approval.decision.approved, true);
    assert.equal(reviewer.proposals.length, 1); // the two 503s were answered before recording
  });

  it("rejects a 429 at once with Throttled, its code and Retry-After", async () => {
    reviewer.throttle("too_many_open", 60, 5);
    await assert.rejects(
      client.requestApproval(ACTION, { summary: "Refund", principal: PRINCIPAL, ...DEADLINE }),
      (error) => {
        assert.ok(error instanceof Throttled);
        assert.ok(error instanceof ReviewerUnavailable); // callers that catch that still catch it
        assert.deepEqual([error.code, error.retryAfter], ["too_many_open", 60]);
        assert.match(error.message, /retry after 60 s/);
        return true;
      },
    );
    assert.equal(reviewer.throttledAnswers.length, 4); // one call, no retry the caller did not ask for
    assert.deepEqual(reviewer.proposals, []);
  });

  it("sends the same request again after Retry-After when the caller chooses", async () => {
    reviewer.throttle("rate_limited", 1);
    const request = buildRequest(ACTION, { summary: "Refund", principal: PRINCIPAL });
    await assert.rejects(client.submit(request, { taskId: "task-throttled" }), (error) => error.retryAfter === 1);
    const submission = await client.submit(request, { taskId: "task-throttled" });
    assert.equal(submission.requestId, request.request_id);
    assert.equal(reviewer.proposals.length, 1);
  });

  it("honours Retry-After on an overloaded consume and outcome", async () => {
    decideAtIntake(reviewer, key, { audience: AUDIENCE });
    const submission = await client.submit(buildRequest(ACTION, { summary: "Refund", principal: PRINCIPAL }));
    reviewer.overloadedAnswers = 2; // the consume is refused twice before it runs, then goes through
    const approval = await client.release(submission, await client.waitForToken(submission, DEADLINE));
    reviewer.overloadedAnswers = 1;
    assert.equal(await approval.report("succeeded"), true);
    assert.equal(reviewer.consumesFor(approval.idempotencyKey).length, 1);
    assert.deepEqual(reviewer.outcomesFor(approval.idempotencyKey), ["succeeded"]);
  });

  it("rejects with ReviewerUnavailable when Reviewer is down", async () => {
    const down = new ReviewerClient({ reviewerUrl: "http://127.0.0.1:9", apiToken: "t", audience: AUDIENCE, retries: 1, backoffSeconds: 0.01 });
    await assert.rejects(down.requestApproval(ACTION, { summary: "Refund", principal: PRINCIPAL, ...DEADLINE }), ReviewerUnavailable);
  });
});

describe("currentApproval", () => {
  it("is the approval a tool runs under, inside async work too", async () => {
    decideAtIntake(reviewer, key, { audience: AUDIENCE });
    const approval = await client.requestApproval(ACTION, { summary: "Refund", principal: PRINCIPAL, ...DEADLINE });
    assert.equal(currentApproval(), undefined);
    const seen = await runningUnder(approval, async () => {
      await new Promise((resolve) => setImmediate(resolve));
      return currentApproval()?.idempotencyKey;
    });
    assert.equal(seen, approval.idempotencyKey);
  });
});
