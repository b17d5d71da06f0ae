// The package as users get it: `npm pack`ed into a tarball, installed into a fresh folder outside the
// source tree, imported from there (both entry points), and its types checked by tsc from there, so a
// file missing from the tarball or a broken .d.ts fails here (as `make sdk-test` does for the wheel). The
// examples of examples/js run there too, as users run them, against a fake Reviewer.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { FakeReviewer, ReviewerKey, decideAtIntake, decideNextProposal } from "@reviewer/gate/testing";

const run = promisify(execFile);
const npm = process.platform === "win32" ? "npm.cmd" : "npm";
const source = fileURLToPath(new URL("..", import.meta.url));
const tsc = join(source, "node_modules", "typescript", "bin", "tsc");
const tokens = fileURLToPath(new URL("../../vectors/tokens.json", import.meta.url));
const examples = fileURLToPath(new URL("../../../examples/js/", import.meta.url));
// What the examples need beside the package: the frameworks its adapters plug into.
const FRAMEWORKS = ["@openai/agents@^0.20.0", "ai@^7.0.0", "zod@^4.0.0", "@langchain/core@^1.0.0", "@langchain/langgraph@^1.0.0"];

describe("the packed package", () => {
  let app;
  let tarball;

  before(async () => {
    const packed = mkdtempSync(join(tmpdir(), "reviewer-gate-pack-"));
    const { stdout } = await run(npm, ["pack", "--json", "--pack-destination", packed], { cwd: source });
    const [{ filename, files }] = JSON.parse(stdout);
    tarball = { path: join(packed, filename), files: files.map((file) => file.path) };
    app = mkdtempSync(join(tmpdir(), "reviewer-gate-app-"));
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
    await run(npm, ["install", "--no-audit", "--no-fund", "--prefer-offline", tarball.path, ...FRAMEWORKS], { cwd: app });
  });

  it("holds the built code, its types and the README, and no sources or tests", () => {
    const built = ["index", "testing", "adapters/openai-agents", "adapters/ai-sdk", "adapters/langgraph"].flatMap((name) => [`dist/${name}.js`, `dist/${name}.d.ts`]);
    for (const file of [...built, "README.md", "package.json"]) {
      assert.ok(tarball.files.includes(file), `${file} is missing from the tarball`);
    }
    assert.deepEqual(tarball.files.filter((file) => file.startsWith("src/") || file.startsWith("test/")), []);
  });

  it("imports from outside the source tree and verifies a decision there", async () => {
    const vectors = JSON.parse(readFileSync(tokens, "utf8"));
    const approved = vectors.cases.find((vector) => vector.name === "approved");
    writeFileSync(join(app, "vectors.json"), JSON.stringify({ gate: vectors.gate, approved }));
    writeFileSync(
      join(app, "check.js"),
      `
      import { readFileSync } from "node:fs";
      import { Gate, MemoryUsedStore, StaticKeySource, ReviewerClient, ToolDescription } from "@reviewer/gate";
      import { FakeReviewer } from "@reviewer/gate/testing";
      const { gate: settings, approved } = JSON.parse(readFileSync("vectors.json", "utf8"));
      const gate = new Gate({ issuer: settings.issuer, audience: settings.audience, keys: new StaticKeySource(settings.jwks), usedStore: new MemoryUsedStore() });
      const v = approved.verify;
      const decision = await gate.verify(approved.token, { taskId: v.task_id, requestId: v.request_id, actionDigest: v.action_digest });
      const where = import.meta.resolve("@reviewer/gate");
      console.log(JSON.stringify({ decision: decision.decision, where, kinds: [typeof ReviewerClient, typeof ToolDescription, typeof FakeReviewer] }));
      `,
    );
    const { stdout } = await run(process.execPath, ["check.js"], { cwd: app });
    const result = JSON.parse(stdout);
    assert.equal(result.decision, "approved");
    assert.ok(result.where.includes("/node_modules/@reviewer/gate/"), result.where);
    assert.ok(!fileURLToPath(result.where).startsWith(source), "imported the source tree, not the installed copy");
    assert.deepEqual(result.kinds, ["function", "function", "function"]);
  });

  it("type-checks a TypeScript agent against the installed .d.ts", async () => {
    writeFileSync(
      join(app, "agent.ts"),
      `
      import { ReviewerClient, NotApproved, type VerifiedDecision } from "@reviewer/gate";
      import { FakeReviewer } from "@reviewer/gate/testing";
      const client = new ReviewerClient({ reviewerUrl: "http://127.0.0.1:8000", apiToken: "t", audience: "urn:agent:x" });
      export async function refund(): Promise<string> {
        try {
          const approval = await client.requestApproval({ tool: "payments.refund", arguments: { amount: "1.00" } }, { summary: "Refund", principal: { id: "u-7" } });
          const decision: VerifiedDecision = approval.decision;
          await approval.report("succeeded");
          return decision.jti + approval.idempotencyKey;
        } catch (error) {
          if (error instanceof NotApproved) return error.code;
          throw error;
        }
      }
      export const fake: typeof FakeReviewer = FakeReviewer;
      `,
    );
    writeFileSync(
      join(app, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", target: "ES2022", strict: true, noEmit: true, skipLibCheck: false, types: [] },
        files: ["agent.ts"],
      }),
    );
    await run(process.execPath, [tsc, "-p", "tsconfig.json"], { cwd: app }).catch((error) => {
      assert.fail(`tsc: ${error.stdout}${error.stderr}`);
    });
  });

  it("type-checks agents on the adapters against the installed .d.ts", async () => {
    writeFileSync(
      join(app, "adapters.ts"),
      `
      import { Agent, tool } from "@openai/agents";
      import { tool as aiTool } from "ai";
      import { z } from "zod";
      import { ReviewerClient, ToolDescription } from "@reviewer/gate";
      import { ReviewerApprovals } from "@reviewer/gate/openai-agents";
      import { ReviewerToolApprovals, type ReviewerApprovalFunction } from "@reviewer/gate/ai-sdk";
      import { tool as lcTool } from "@langchain/core/tools";
      import { ReviewedToolNode, pendingApprovals } from "@reviewer/gate/langgraph";
      const client = new ReviewerClient({ reviewerUrl: "http://127.0.0.1:8000", apiToken: "t", audience: "urn:agent:x" });
      const approvals = new ReviewerApprovals(client, { decisionTimeoutSeconds: 60 });
      const refund = tool({ name: "refund", description: "Refund.", parameters: z.object({ order_id: z.string() }), execute: async ({ order_id }) => order_id });
      export const agent = new Agent({ name: "ops", tools: [approvals.gate(refund, new ToolDescription({ name: "payments.refund" }))] });
      export const run = () => approvals.run(agent, "Refund order 1182");
      const aiApprovals = new ReviewerToolApprovals(client);
      const aiRefund = aiTool({ description: "Refund.", inputSchema: z.object({ order_id: z.string() }), execute: async ({ order_id }) => order_id });
      export const tools = { refund: aiApprovals.gate("refund", aiRefund) };
      export const toolApproval: Record<string, ReviewerApprovalFunction> = aiApprovals.toolApproval();
      const lcRefund = lcTool(async ({ order_id }: { order_id: string }) => order_id, { name: "refund", description: "Refund.", schema: z.object({ order_id: z.string() }) });
      export const node = new ReviewedToolNode([lcRefund], client, { gated: ["refund"] }).node();
      export const pending = pendingApprovals;
      `,
    );
    // The frameworks' own .d.ts need their @types under strict checking: skipLibCheck leaves those
    // alone, and a name missing from this package's types still fails.
    writeFileSync(
      join(app, "tsconfig.adapters.json"),
      JSON.stringify({
        compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", target: "ES2022", strict: true, noEmit: true, skipLibCheck: true, types: [] },
        files: ["adapters.ts"],
      }),
    );
    await run(process.execPath, [tsc, "-p", "tsconfig.adapters.json"], { cwd: app }).catch((error) => {
      assert.fail(`tsc: ${error.stdout}${error.stderr}`);
    });
  });

  describe("the examples of examples/js", () => {
    const AUDIENCE = "urn:agent:examples";
    let reviewer;
    let key;

    before(async () => {
      cpSync(examples, join(app, "examples"), { recursive: true, filter: (path) => !path.includes("node_modules") });
      key = await ReviewerKey.create();
      reviewer = await new FakeReviewer([key]).start();
    });
    after(() => reviewer.stop());

    async function example(script, ledger) {
      const args = [join("examples", script), "--reviewer-url", reviewer.url, "--audience", AUDIENCE, "--ledger", ledger];
      const env = { ...process.env, REVIEWER_API_TOKEN: "example-token", TMPDIR: mkdtempSync(join(tmpdir(), "reviewer-gate-example-")) };
      const { stdout } = await run(process.execPath, args, { cwd: app, env });
      const entries = readFileSync(join(app, ledger), "utf8").split("\n").filter(Boolean).map((line) => JSON.parse(line));
      return { stdout, entries };
    }

    for (const script of ["rest-refund.js", "openai-agents-refund.js", "ai-sdk-refund.js", "langgraph-refund.js"]) {
      it(`${script} refunds once on Reviewer's approval, with the decision as the idempotency key`, async () => {
        const decided = decideNextProposal(reviewer, key, { audience: AUDIENCE });
        const { stdout, entries } = await example(script, `${script}.jsonl`);
        const token = await decided;
        const jti = JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString()).jti;
        assert.match(stdout, /refunded EUR 40.00 for order 1182: tx-/);
        assert.deepEqual(entries.map((entry) => [entry.order_id, entry.amount, entry.idempotency_key]), [["1182", "40.00", jti]]);
        assert.equal(reviewer.consumesFor(jti).length, 1);
        assert.deepEqual(reviewer.outcomesFor(jti), ["succeeded"]);
      });
    }

    it("a denial at intake refunds nothing", async () => {
      decideAtIntake(reviewer, key, { audience: AUDIENCE, decision: "rejected", reason: "over the limit", consume: false });
      try {
        const args = [join("examples", "rest-refund.js"), "--reviewer-url", reviewer.url, "--audience", AUDIENCE, "--ledger", "denied.jsonl"];
        const { stdout } = await run(process.execPath, args, { cwd: app, env: { ...process.env, REVIEWER_API_TOKEN: "t" } });
        assert.match(stdout, /not refunded \(rejected\): over the limit/);
      } finally {
        reviewer.intakeDecision = null;
      }
    });
  });
});
