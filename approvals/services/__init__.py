"""The only write path of the approval domain.

Every function here is atomic, changes state only through `transition()`, writes its audit event in the
same transaction, and schedules broadcasts and deliveries with on_commit (events.py) or an outbox row.
Views, consumers, the REST API, management commands and admin actions call these; none of them saves a
domain row itself.

Refusals are exceptions carrying a stable `code` (used by the API, the socket and the tests). A refusal
that must leave a trace (a failed step-up, a vote after expiry) records its audit event and commits
before the exception is raised.
"""

from approvals.services.agents import (  # noqa: F401
    AGENT_EDITABLE,
    register_agent,
    rotate_agent_tokens,
    rotate_signing_key,
    update_agent,
)
from approvals.services.break_glass import (  # noqa: F401
    break_glass_release,
    choose_reviewers,
    complete_post_hoc_review,
    note_overdue_reviews,
    open_reviews_for,
    releases_this_week,
    rule_for_proposal,
)
from approvals.services.common import (  # noqa: F401
    SYSTEM,
    actor_label,
    agent_actor,
    proposal_subject,
    record,
)
from approvals.services.decisions import (  # noqa: F401
    consume_decision,
    may_revoke,
    note_compensation,
    record_outcome,
    revoke_decision,
)
from approvals.services.devices import (  # noqa: F401
    BACKUP_CODE_COUNT,
    confirm_totp_enrollment,
    record_sign_in_code_refused,
    record_sign_in_throttled,
    register_passkey,
    remove_passkey,
    rename_passkey,
    reset_devices,
    start_totp_enrollment,
)
from approvals.services.eligibility import (  # noqa: F401
    ineligibility,
    ineligibility_from,
    is_principal,
    proposal_for_user,
    tenant_role,
    threshold_groups,
    user_groups_for,
)
from approvals.services.errors import (  # noqa: F401
    ActionRefused,
    BreakGlassRefused,
    CompensationRefused,
    ConfigRefused,
    Conflict,
    ConsumeRefused,
    DeviceResetRefused,
    EditRefused,
    HaltedError,
    IntakeError,
    NotFound,
    PolicyInvalid,
    PostHocReviewRefused,
    RevokeRefused,
    ServiceError,
    VoteRefused,
)
from approvals.services.halts import (  # noqa: F401
    active_halt,
    halt,
    resume,
)
from approvals.services.intake import (  # noqa: F401
    record_intake_refusal,
    submit_proposal,
)
from approvals.services.lifecycle import (  # noqa: F401
    closed_reason,
    enqueue_cancel,
    supersession_chain,
    transition,
)
from approvals.services.outbox import (  # noqa: F401
    claim_due_outbox,
    claim_outbox_message,
    mark_outbox_delivered,
    mark_outbox_failed,
    outbox_backoff_seconds,
    withdraw_outbox,
)
from approvals.services.people import (  # noqa: F401
    person_values,
    record_person_changed,
)
from approvals.services.policies import (  # noqa: F401
    POLICY_VERSION_DEFAULTS,
    activate_policy_version,
    break_glass_people,
    create_policy,
    create_policy_version,
)
from approvals.services.quorum import (  # noqa: F401
    Quorum,
    count_quorum,
)
from approvals.services.reconcile import (  # noqa: F401
    TERMINAL_TASK_STATES,
    apply_task_state,
    close_for_ended_task,
    expire_due,
    mark_unknown,
    settle_from_task_state,
)
from approvals.services.tenants import (  # noqa: F401
    ADMIN_GROUP_SLUG,
    ADMIN_SITE_GROUP,
    TTL_TOO_SHORT,
    add_group_member,
    admin_tenant_ids,
    create_group,
    create_tenant,
    grant_admin_site,
    group_member_refusal,
    is_config_admin,
    membership_refusal,
    remove_group_member,
    remove_tenant_membership,
    set_tenant_membership,
    update_tenant,
)
from approvals.services.votes import (  # noqa: F401
    cast_vote,
    edit_proposal,
    request_info,
)
