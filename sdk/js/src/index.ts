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
export {
  Approval,
  CLOSED_WITHOUT_DECISION,
  Submission,
  buildRequest,
  currentApproval,
  rfc3339,
  runningUnder,
  type RequestFields,
} from "./approval.js";
export {
  MAX_WAIT_SECONDS,
  RequestRefused,
  ReviewerClient,
  type ApprovalOptions,
  type ReviewerClientOptions,
  type SubmitOptions,
  type WaitOptions,
} from "./client.js";
export {
  NAME_MAX,
  SUMMARY_MAX,
  TARGET_ARGUMENTS,
  TEXT_MAX,
  ToolDescription,
  ToolDescriptionError,
  type DescribedCall,
  type Principal,
  type RequestFieldsOptions,
  type ToolDescriptionFields,
} from "./describe.js";
export { GatingRules, RISK_KEYWORDS, riskHint } from "./risk.js";
export {
  ACCEPT_HEADER,
  ENDPOINT_PATH,
  TransactionAuthorization,
  TransactionAuthorizationError,
  challengeOf,
  transactionAuthorizedFetch,
  type TransactionAuthorizationOptions,
} from "./tac.js";
