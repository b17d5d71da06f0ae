/**
 * RFC 8785 (JSON Canonicalization Scheme) and the action digest Reviewer binds every decision to.
 *
 * JCS serializes numbers as ECMAScript does (Number.prototype.toString, with -0 as 0), sorts object keys
 * by their UTF-16 code units (what Array.prototype.sort does with strings) and writes strings with
 * JSON.stringify's escapes, keeping every other character as UTF-8. It is written out here rather than
 * taken from a package so that what it refuses matches Python's rfc8785: a number that is not finite,
 * a string that is not Unicode text (a lone surrogate), and any value JSON has no form for.
 */
import { createHash } from "node:crypto";

/** A value RFC 8785 has no canonical form for (the Python package raises rfc8785.CanonicalizationError). */
export class CanonicalizationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CanonicalizationError";
  }
}

function refuse(message: string): never {
  throw new CanonicalizationError(message);
}

function serialize(value: unknown, path: string): string {
  if (value === null || value === true || value === false) {
    return String(value);
  }
  switch (typeof value) {
    case "number":
      if (!Number.isFinite(value)) refuse(`${path}: ${value} is not representable in JCS`);
      return JSON.stringify(value); // ECMAScript's shortest round-trip form; -0 gives "0"
    case "string":
      if (!value.isWellFormed()) refuse(`${path}: a lone surrogate is not Unicode text`);
      return JSON.stringify(value);
    case "object": {
      if (Array.isArray(value)) {
        return `[${value.map((item, index) => serialize(item, `${path}[${index}]`)).join(",")}]`;
      }
      const prototype = Object.getPrototypeOf(value);
      if (prototype !== Object.prototype && prototype !== null) {
        refuse(`${path}: a ${prototype?.constructor?.name ?? "non-plain"} object is not JSON`);
      }
      const record = value as Record<string, unknown>;
      const keys = Object.keys(record).sort(); // UTF-16 code unit order, as RFC 8785 asks
      return `{${keys
        .map((key) => {
          if (!key.isWellFormed()) refuse(`${path}: key with a lone surrogate`);
          return `${JSON.stringify(key)}:${serialize(record[key], `${path}.${key}`)}`;
        })
        .join(",")}}`;
    }
    default:
      return refuse(`${path}: a ${typeof value} is not JSON`);
  }
}

/** The RFC 8785 canonical JSON text of `value`. Throws CanonicalizationError otherwise. */
export function canonicalize(value: unknown): string {
  return serialize(value, "$");
}

/**
 * `sha256:` + hex SHA-256 of the RFC 8785 form of the action: key order does not matter, Unicode is kept
 * as is (not normalized), and `"40.00"` differs from `40.0` (send amounts as strings).
 */
export function actionDigest(action: unknown): string {
  return `sha256:${createHash("sha256").update(canonicalize(action), "utf8").digest("hex")}`;
}
