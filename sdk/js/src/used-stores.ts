/** Single use: where the gate records each decision's jti, so that a token releases one action once. */
import { createHash } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, statSync, unlinkSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";

export interface UsedDecisionStore {
  /** Record jti as used. True only the first time it is claimed (across everyone sharing the store). */
  claim(jti: string, expiresAt: number): boolean | Promise<boolean>;
}

/** Single use within one process (tests, single-process agents that may forget on restart). */
export class MemoryUsedStore implements UsedDecisionStore {
  private readonly used = new Map<string, number>();

  claim(jti: string, expiresAt: number): boolean {
    if (this.used.has(jti)) return false;
    this.used.set(jti, expiresAt);
    return true;
  }
}

/**
 * Single use across processes sharing one directory (on one machine, or a file system with atomic
 * exclusive create): each claimed jti is a file created with O_CREAT | O_EXCL (`wx`), which exactly one
 * claimant wins, whoever races. The name is the SHA-256 of the jti, so any jti makes a safe name.
 *
 * Files are kept a day past the token's expiry (the gate refuses an expired token before it gets here,
 * so forgetting them later cannot re-open a decision); the sweep runs at most once an hour.
 */
export class FileUsedStore implements UsedDecisionStore {
  static readonly RETAIN_AFTER_EXPIRY_SECONDS = 86400;
  static readonly SWEEP_EVERY_SECONDS = 3600;
  readonly directory: string;
  private lastSweep = 0;

  constructor(directory: string) {
    this.directory = directory;
    mkdirSync(directory, { recursive: true, mode: 0o700 });
  }

  async claim(jti: string, expiresAt: number): Promise<boolean> {
    const name = createHash("sha256").update(jti, "utf8").digest("hex");
    try {
      await writeFile(join(this.directory, `${name}.json`), JSON.stringify({ jti, expires_at: expiresAt }), {
        flag: "wx",
        mode: 0o600,
      });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "EEXIST") return false;
      throw error;
    }
    this.sweep();
    return true;
  }

  private sweep(): void {
    const now = Date.now() / 1000;
    if (now - this.lastSweep < FileUsedStore.SWEEP_EVERY_SECONDS) return;
    this.lastSweep = now;
    const before = now - FileUsedStore.RETAIN_AFTER_EXPIRY_SECONDS;
    for (const entry of readdirSync(this.directory)) {
      if (!entry.endsWith(".json")) continue;
      const path = join(this.directory, entry);
      try {
        if (recordedExpiry(path) < before) unlinkSync(path);
      } catch {
        // swept by another process meanwhile, or unreadable: left for the next sweep
      }
    }
  }
}

/** The expiry a claim file records; a file cut short by a crash counts from when it was written. */
function recordedExpiry(path: string): number {
  try {
    const recorded = JSON.parse(readFileSync(path, "utf8")) as { expires_at?: unknown };
    if (typeof recorded.expires_at === "number") return recorded.expires_at;
  } catch {
    // not JSON: fall through to the file's time
  }
  return statSync(path).mtimeMs / 1000;
}
