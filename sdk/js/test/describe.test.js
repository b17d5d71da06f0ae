// ToolDescription: what a tool call's proposal says, from a description or the defaults (the Python
// package's tests/test_describe.py, case for case).
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { ToolDescription, ToolDescriptionError, riskHint } from "@reviewer/gate";

const ARGUMENTS = { order_id: "7002", amount: "22.00", currency: "USD" };

describe("ToolDescription", () => {
  it("takes the arguments' currency over the description's", () => {
    const fields = new ToolDescription({ summary: "Refund {currency} {amount}", currency: "EUR" }).requestFields("refund", ARGUMENTS);
    assert.equal(fields.summary, "Refund USD 22.00");
    assert.deepEqual([fields.consequences.amount, fields.consequences.currency], ["22.00", "USD"]);
  });

  it("lists the arguments in the schema's order by default, the currency by the amount", () => {
    const fields = new ToolDescription().requestFields("refund", ARGUMENTS, {
      toolText: "Refund an order.\nMore.",
      argumentOrder: ["amount", "order_id"],
    });
    assert.equal(fields.summary, "Refund an order: amount USD 22.00, order_id 7002");
    assert.deepEqual(fields.action, { tool: "refund", arguments: ARGUMENTS, target: "order_id:7002" });
    assert.equal(fields.principal, undefined); // the adapter's own default applies
  });

  it("fills a template, showing ? for a name the call did not send and keeping {{ }}", () => {
    const description = new ToolDescription({ name: "payments.refund", summary: "{tool}: {amount} {{{note}}}" });
    assert.equal(description.requestFields("refund", ARGUMENTS).summary, "payments.refund: 22.00 {?}");
  });

  it("refuses a principal function that returns no id before anything is sent", () => {
    const description = new ToolDescription({ principal: () => ({ display: "nobody" }) });
    assert.throws(() => description.requestFields("refund", ARGUMENTS, { context: {} }), (error) => error instanceof ToolDescriptionError && error.field === "principal");
  });

  for (const [fields, field] of [
    [{ consequences: "x".repeat(2001) }, "consequences"],
    [{ summary: "Refund {amount" }, "summary"],
    [{ summary: "Refund {amount:>8}" }, "summary"],
    [{ summary: "Refund {order}" }, "summary"],
    [{ name: "n".repeat(201) }, "name"],
    [{ principal: "casey" }, "principal"],
    [{ target: "invoice_id" }, "target"],
    [{ currency: "EURO" }, "currency"],
  ]) {
    it(`names the field of a description that cannot work: ${field} ${JSON.stringify(fields).slice(0, 40)}`, () => {
      assert.throws(
        () => new ToolDescription(fields).checked("refund", Object.keys(ARGUMENTS)),
        (error) => error instanceof ToolDescriptionError && error.field === field,
      );
    });
  }
});

describe("riskHint", () => {
  it("names the kind of a risky tool name, shell first", () => {
    assert.equal(riskHint("run_shell_write"), "shell_exec");
    assert.equal(riskHint("delete_file"), "file_write");
    assert.equal(riskHint("http_post_webhook"), "external_api_write");
    assert.equal(riskHint("lookup_order"), null);
  });
});
