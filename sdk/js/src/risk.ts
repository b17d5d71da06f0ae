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
