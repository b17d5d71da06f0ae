/**
 * What an adapter tells the reviewers about a tool call: a ToolDescription per tool (the Python
 * package's reviewer_gate.describe, same fields, same defaults, same limits).
 *
 *     const refund = new ToolDescription({
 *       name: "payments.refund",                        // what Reviewer's policies match
 *       summary: "Refund {currency} {amount} for order {order_id}",
 *       consequences: "Money goes back to the customer's card",
 *       target: "order_id",                             // what the call acts on
 *       currency: "EUR",                                // when the arguments name none
 *       reversible: false,
 *       principal: (context) => ({ id: context.userId, display: context.userName }),
 *     });
 *
 * Every field is optional; without one the defaults come from the tool itself: its name, the first line
 * of its description, its arguments in the order its schema lists them, currency and amount put
 * together, a target from the usual key arguments. Templates are Python's `str.format` fields by name
 * (`{amount}`, `{{` for a brace); format specs and conversions (`{amount:>8}`, `{amount!r}`) are refused.
 * A description that cannot work is refused when the adapter is built (ToolDescriptionError naming the
 * field), never at the moment a call needs its approval.
 */
import type { JsonObject } from "./decision.js";

export const SUMMARY_MAX = 500; // Reviewer refuses a longer summary
export const TEXT_MAX = 2000; // consequences, and a tool's description as shown
export const NAME_MAX = 200; // Reviewer's tool column
/** Arguments that name what a call acts on, in the order they are tried. */
export const TARGET_ARGUMENTS: readonly string[] = [
  "order_id",
  "invoice_id",
  "account_id",
  "customer_id",
  "recipient",
  "path",
  "file",
  "url",
  "id",
];

/** A description that cannot describe its tool; `field` names what is wrong. */
export class ToolDescriptionError extends Error {
  readonly field: string;

  constructor(field: string, message: string) {
    super(`${field}: ${message}`);
    this.name = "ToolDescriptionError";
    this.field = field;
  }
}

export interface Principal {
  id: string;
  display?: string;
}

export interface ToolDescriptionFields {
  name?: string;
  summary?: string;
  consequences?: string;
  target?: string;
  currency?: string;
  reversible?: boolean;
  /** A function of the run's context returning `{id, display}`: the person the agent acts for. */
  principal?: (context: unknown) => Principal;
}

export interface RequestFieldsOptions {
  toolText?: string;
  argumentOrder?: readonly string[];
  context?: unknown;
  defaultPrincipal?: Principal;
  effect?: string;
}

export interface DescribedCall {
  action: JsonObject;
  summary: string;
  consequences: JsonObject;
  principal?: { id: string; display: string };
}

/** Lengths and cuts by code point, as Python counts. */
const length = (text: string) => [...text].length;
const cut = (text: string, limit: number) => [...text].slice(0, limit).join("");

type Part = { literal: string } | { field: string };

/** The template's literal text and field names; throws a message for what is no template. */
function parseTemplate(template: string): Part[] {
  const parts: Part[] = [];
  let literal = "";
  for (let index = 0; index < template.length; index += 1) {
    const char = template[index];
    if (char === "{" && template[index + 1] === "{") {
      literal += "{";
      index += 1;
    } else if (char === "}" && template[index + 1] === "}") {
      literal += "}";
      index += 1;
    } else if (char === "}") {
      throw new Error("Single '}' encountered in format string");
    } else if (char === "{") {
      const end = template.indexOf("}", index);
      if (end < 0) throw new Error("expected '}' before end of string");
      const field = template.slice(index + 1, end);
      if (!field || /[{!:.[]/.test(field)) {
        throw new Error(`{${field}}: only a field by name, without format spec or conversion`);
      }
      if (literal) parts.push({ literal });
      literal = "";
      parts.push({ field });
      index = end;
    } else {
      literal += char;
    }
  }
  if (literal) parts.push({ literal });
  return parts;
}

/** The template with the call's values; a name the call did not send shows as "?" (never throws). */
function fill(template: string, values: Map<string, string>): string {
  let parts: Part[];
  try {
    parts = parseTemplate(template);
  } catch {
    return template; // checked() refused it already; an unchecked one is shown as written
  }
  return parts.map((part) => ("literal" in part ? part.literal : (values.get(part.field) ?? "?"))).join("");
}

function plain(value: unknown): boolean {
  return value !== undefined && value !== null && value !== "" && typeof value !== "object";
}

/** Python's str() of a plain value (True/False as Python writes them). */
function pythonString(value: unknown): string {
  if (value === true) return "True";
  if (value === false) return "False";
  return String(value);
}

/** Python's json.dumps(value, ensure_ascii=False, sort_keys=True): ", " and ": " separators. */
function pythonJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(pythonJson).join(", ")}]`;
  if (value !== null && typeof value === "object") {
    const record = value as Record<string, unknown>;
    return `{${Object.keys(record)
      .sort()
      .map((key) => `${JSON.stringify(key)}: ${pythonJson(record[key])}`)
      .join(", ")}}`;
  }
  if (value === undefined) return "null";
  return JSON.stringify(value);
}

function shown(value: unknown): string {
  return plain(value) ? pythonString(value) : cut(pythonJson(value), 200);
}

function firstLine(text: string): string {
  const line = (text || "").trim().split("\n", 1)[0] ?? "";
  return cut(line.trim().replace(/\.+$/, ""), SUMMARY_MAX);
}

/** "order_id 7002, amount EUR 22.00": the schema's order first, then the rest as sent. */
function listed(argumentsGiven: JsonObject, order: readonly string[], currency: string): string {
  const names = [
    ...order.filter((name) => name in argumentsGiven),
    ...Object.keys(argumentsGiven).filter((name) => !order.includes(name)),
  ];
  const parts: string[] = [];
  for (const name of names) {
    if (name === "currency" && plain(argumentsGiven.amount)) continue; // shown with the amount
    let text = shown(argumentsGiven[name]);
    if (name === "amount" && currency) text = `${currency} ${text}`;
    parts.push(`${name} ${text}`);
  }
  return cut(parts.join(", "), SUMMARY_MAX);
}

function principalOf(value: unknown): { id: string; display: string } {
  const record = (value ?? {}) as { id?: unknown; display?: unknown };
  const id = record.id === undefined || record.id === null ? "" : String(record.id);
  if (typeof value !== "object" || value === null || !id.trim()) {
    throw new ToolDescriptionError("principal", "returns {id: ..., display: ...} with a non-empty id");
  }
  return { id: cut(id, 200), display: cut(record.display ? String(record.display) : id, 200) };
}

export class ToolDescription {
  readonly name: string | undefined;
  readonly summary: string | undefined;
  readonly consequences: string | undefined;
  readonly target: string | undefined;
  readonly currency: string | undefined;
  readonly reversible: boolean | undefined;
  readonly principal: ((context: unknown) => Principal) | undefined;

  constructor(fields: ToolDescriptionFields = {}) {
    this.name = fields.name;
    this.summary = fields.summary;
    this.consequences = fields.consequences;
    this.target = fields.target;
    this.currency = fields.currency;
    this.reversible = fields.reversible;
    this.principal = fields.principal;
    Object.freeze(this);
  }

  /** This description, refused now if it cannot work for the tool (`argumentNames`: its schema's). */
  checked(toolName: string, argumentNames?: readonly string[]): this {
    if (this.name !== undefined && !(length(this.name) > 0 && length(this.name) <= NAME_MAX)) {
      throw new ToolDescriptionError("name", `the tool name to send is 1 to ${NAME_MAX} characters`);
    }
    for (const [field, text, limit] of [
      ["summary", this.summary, SUMMARY_MAX],
      ["consequences", this.consequences, TEXT_MAX],
    ] as const) {
      if (text === undefined) continue;
      if (length(text) > limit) throw new ToolDescriptionError(field, `${length(text)} characters; at most ${limit}`);
      let parts: Part[];
      try {
        parts = parseTemplate(text);
      } catch (error) {
        throw new ToolDescriptionError(field, `not a template: ${(error as Error).message}`);
      }
      const known = new Set(["currency", "tool", ...(argumentNames ?? [])]);
      const unknown = [
        ...new Set(parts.flatMap((part) => ("field" in part && argumentNames && !known.has(part.field) ? [part.field] : []))),
      ].sort();
      if (unknown.length) {
        throw new ToolDescriptionError(field, `names ${unknown.join(", ")}, which ${toolName} does not take`);
      }
    }
    if (this.target !== undefined && argumentNames !== undefined && !argumentNames.includes(this.target)) {
      throw new ToolDescriptionError("target", `${toolName} takes no argument ${JSON.stringify(this.target)}`);
    }
    if (this.currency !== undefined && !/^\p{L}{3}$/u.test(this.currency)) {
      throw new ToolDescriptionError("currency", "an ISO 4217 code such as EUR");
    }
    if (this.principal !== undefined && typeof this.principal !== "function") {
      throw new ToolDescriptionError("principal", "a function of the run's context");
    }
    return this;
  }

  /**
   * `action`, `summary`, `consequences` and `principal` for ReviewerClient.requestApproval: what a
   * reviewer reads about this call.
   */
  requestFields(toolName: string, argumentsGiven: JsonObject, options: RequestFieldsOptions = {}): DescribedCall {
    const args: JsonObject = { ...argumentsGiven };
    const sentName = this.name ?? toolName;
    const currency = String(args.currency || this.currency || "");
    const toolText = options.toolText ?? "";
    const what = firstLine(toolText) || toolName;
    const values = new Map(Object.entries(args).map(([name, value]) => [name, shown(value)]));
    if (!values.has("currency")) values.set("currency", currency);
    values.set("tool", sentName);
    const summary =
      this.summary !== undefined
        ? fill(this.summary, values)
        : Object.keys(args).length
          ? `${what}: ${listed(args, options.argumentOrder ?? [], currency)}`
          : what;
    const action: JsonObject = { tool: sentName, arguments: args };
    const target = this.target ?? TARGET_ARGUMENTS.find((name) => plain(args[name]));
    if (target && plain(args[target])) action.target = `${target}:${pythonString(args[target])}`;
    const consequences: JsonObject = {
      effect: this.consequences ? fill(this.consequences, values) : options.effect || what,
      tool: toolName,
    };
    if (toolText) consequences.tool_description = cut(toolText, TEXT_MAX);
    if (plain(args.amount)) {
      consequences.amount = pythonString(args.amount);
      if (currency) consequences.currency = currency;
    }
    if (this.reversible !== undefined) consequences.reversible = this.reversible;
    const principal = this.principal !== undefined ? this.principal(options.context) : options.defaultPrincipal;
    const described: DescribedCall = { action, summary: cut(summary, SUMMARY_MAX), consequences };
    if (principal !== undefined && principal !== null) described.principal = principalOf(principal);
    return described;
  }
}
