/**
 * Which tool calls need a human by default: the keyword hint of the Python package's reviewer_gate.risk.
 * A hint is a default, not a policy: Reviewer's policies decide what needs people; this only decides
 * which calls are sent to Reviewer at all.
 */
export const RISK_KEYWORDS: ReadonlyArray<readonly [string, readonly string[]]> = [
  ["shell_exec", ["shell", "exec", "bash", "run_command", "terminal"]],
  ["file_write", ["write", "edit", "delete", "remove", "rm_", "mv_", "move", "create_file"]],
  ["external_api_write", ["http_post", "http_put", "http_delete", "api_write", "post_", "put_", "delete_"]],
];

/** "shell_exec", "file_write", "external_api_write", or null for a name that matches no keyword. */
export function riskHint(toolName: string): string | null {
  const name = toolName.toLowerCase();
  for (const [kind, keywords] of RISK_KEYWORDS) {
    if (keywords.some((keyword) => name.includes(keyword))) return kind;
  }
  return null;
}

/** A shell-style pattern (`*`, `?`, `[seq]`, `[!seq]`; case-sensitive) as Python's fnmatchcase reads it. */
function patternRegExp(pattern: string): RegExp {
  let source = "";
  for (let i = 0; i < pattern.length; i += 1) {
    const char = pattern[i] as string;
    const close = char === "[" ? pattern.indexOf("]", i + 2) : -1;
    if (char === "*") source += "[\\s\\S]*";
    else if (char === "?") source += "[\\s\\S]";
    else if (close !== -1) {
      const body = pattern.slice(i + 1, close).replace(/\\/g, "\\\\");
      source += body.startsWith("!") ? `[^${body.slice(1)}]` : `[${body}]`;
      i = close;
    } else source += char.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
  }
  return new RegExp(`^${source}$`);
}

/**
 * Which tools an adapter sends to Reviewer (the Python package's GatingRules): `open` patterns are never
 * gated, `gated` patterns always are; a name that matches neither is gated when `useRiskHint` and the
 * risk hint names a kind.
 */
export class GatingRules {
  private readonly gated: RegExp[];
  private readonly open: RegExp[];

  constructor(gated: Iterable<string> = [], open: Iterable<string> = [], readonly useRiskHint = true) {
    this.gated = [...gated].map(patternRegExp);
    this.open = [...open].map(patternRegExp);
  }

  isGated(toolName: string): boolean {
    if (this.open.some((pattern) => pattern.test(toolName))) return false;
    if (this.gated.some((pattern) => pattern.test(toolName))) return true;
    return this.useRiskHint && riskHint(toolName) !== null;
  }
}
