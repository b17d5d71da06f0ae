// The shared test vectors of sdk/vectors/ (also checked by the Python package,
// sdk/python/tests/test_vectors.py): the canonical form and digest of each JSON text, and what the gate
// answers for each decision token.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";

import { CanonicalizationError, Gate, GateError, MemoryUsedStore, StaticKeySource, actionDigest, canonicalize } from "@reviewer/gate";

const vectors = new URL("../../vectors/", import.meta.url);
const canonical = JSON.parse(readFileSync(new URL("canonical.json", vectors), "utf8"));
const tokens = JSON.parse(readFileSync(new URL("tokens.json", vectors), "utf8"));

describe("canonical JSON vectors", () => {
  for (const vector of canonical.cases) {
    it(vector.name, () => {
      const value = JSON.parse(vector.json);
      // JSON.parse has no integers beyond 2**53: those cases say what the double canonicalizes to.
      const expected = vector.js ?? vector;
      if (expected.refused) {
        assert.throws(() => actionDigest(value), CanonicalizationError);
        return;
      }
      assert.equal(canonicalize(value), expected.canonical);
      assert.equal(actionDigest(value), expected.digest);
    });
  }
});

function aGate(tenant) {
  const settings = tokens.gate;
  return new Gate({
    issuer: settings.issuer,
    audience: settings.audience,
    keys: new StaticKeySource(settings.jwks),
    usedStore: new MemoryUsedStore(),
    leewaySeconds: settings.leeway_seconds,
    tenant: tenant ?? null,
  });
}

describe("decision token vectors", () => {
  for (const vector of tokens.cases) {
    it(vector.name, async () => {
      const gate = aGate(vector.tenant);
      const binding = {
        taskId: vector.verify.task_id,
        requestId: vector.verify.request_id,
        actionDigest: vector.verify.action_digest,
        contextId: vector.verify.context_id,
        expiresAt: vector.verify.expires_at,
      };
      for (let use = 1; use < (vector.times ?? 1); use += 1) {
        await gate.verify(vector.token, binding); // the earlier uses of a replayed token verify
      }
      if (vector.expect.code) {
        await assert.rejects(gate.verify(vector.token, binding), (error) => {
          assert.ok(error instanceof GateError);
          assert.equal(error.code, vector.expect.code);
          return true;
        });
      } else {
        const decision = await gate.verify(vector.token, binding);
        assert.deepEqual([decision.decision, decision.edited], [vector.expect.decision, vector.expect.edited]);
        assert.equal(decision.approved, vector.expect.decision === "approved");
      }
    });
  }
});
