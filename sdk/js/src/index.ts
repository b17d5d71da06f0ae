/**
 * @reviewer/gate: ask Reviewer before an agent acts, and act only on its verified, consumed decision.
 * The TypeScript twin of the Python package reviewer-gate (sdk/python), same contract, same error codes.
 */
export { actionDigest, canonicalize, CanonicalizationError } from "./canonical.js";
export {
  ALGORITHMS,
  DECISIONS,
  EXTENSION_URI,
  REQUIRED_CLAIMS,
  TOKEN_TYPE,
  approvalRequestMetadata,
  decisionTokenFromMetadata,
  type DecisionKind,
  type JsonObject,
  type PolicyRef,
  type VerifiedDecision,
} from "./decision.js";
export { GateError, NotApproved, ReviewerUnavailable, Throttled } from "./errors.js";
export { Gate, OVERLOAD_RETRY_SECONDS, type Binding, type GateOptions, type OutcomeStatus } from "./gate.js";
export {
  JWKSKeySource,
  StaticKeySource,
  type JWKSKeySourceOptions,
  type JwksFetch,
  type KeySource,
  type PublicKey,
} from "./keys.js";
export { FileUsedStore, MemoryUsedStore, type UsedDecisionStore } from "./used-stores.js";
