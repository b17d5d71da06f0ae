/** The HTTP details the gate and the client share: headers, Reviewer's error body, Retry-After. */

export interface Answer {
  status: number;
  headers: Headers;
  body: unknown;
  text: string;
}

/** One HTTP call answered in full (the body read, as JSON when it parses), within `timeoutSeconds`. */
export async function call(
  method: string,
  url: string,
  options: { body?: unknown; headers?: Record<string, string>; timeoutSeconds: number },
): Promise<Answer> {
  const headers: Record<string, string> = { Accept: "application/json", ...options.headers };
  let payload: string | undefined;
  if (options.body !== undefined) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(options.body);
  }
  const response = await fetch(url, {
    method,
    headers,
    body: payload,
    signal: AbortSignal.timeout(options.timeoutSeconds * 1000),
  });
  const text = await response.text();
  let body: unknown = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  return { status: response.status, headers: response.headers, body, text };
}

/** (code, message) from Reviewer's `{"error": {"code", "message", "field"}}`, tolerating other bodies. */
export function errorOf(answer: Answer): { code: string | null; message: string; field: string | null } {
  const error =
    typeof answer.body === "object" && answer.body !== null
      ? (answer.body as { error?: unknown }).error
      : undefined;
  if (typeof error !== "object" || error === null) {
    return { code: null, message: `HTTP ${answer.status}: ${answer.text.slice(0, 200)}`, field: null };
  }
  const { code, message, field } = error as { code?: unknown; message?: unknown; field?: unknown };
  return {
    code: typeof code === "string" ? code : null,
    message: message ? String(message) : `HTTP ${answer.status}`,
    field: typeof field === "string" ? field : null,
  };
}

/** Retry-After in seconds, clamped to [low, high]; `otherwise` when absent or not a number. */
export function retryAfterSeconds(answer: Answer, low: number, high: number, otherwise: number): number {
  const header = answer.headers.get("Retry-After");
  if (header === null || header.trim() === "") return otherwise;
  const seconds = Number(header);
  if (!Number.isFinite(seconds)) return otherwise; // an HTTP date, which Reviewer does not send
  return Math.min(Math.max(seconds, low), high);
}

export function bearer(apiToken: string | null | undefined): Record<string, string> {
  return apiToken ? { Authorization: `Bearer ${apiToken}` } : {};
}
