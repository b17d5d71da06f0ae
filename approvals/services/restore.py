"""After a restore from a backup: no decision the backup holds unconsumed can be consumed again.

A decision consumed after the backup was taken is unconsumed again in the restored database, and its
token still verifies (the same key signed it): only the agent's own single-use store would stop a second
effect, and an agent that lost its store too, or a second agent process, would act twice. So the
restore procedure (docs/backup-and-restore.md) revokes every released decision that is not consumed
and not yet expired, before Daphne and the workers start: a consume of any of them is then refused
(`revoked`), and CancelTask is queued for their tasks. The agent asks again for what still matters.
"""

from django.db import transaction
from django.utils import timezone

from approvals.models import Proposal
from approvals.services.lifecycle import revoke_proposal
from approvals.states import RELEASED
from audit.labels import SYSTEM, actor_label

RESTORE_REASON = (
    "restored from a backup: this decision may have been consumed after the backup was taken, so it is "
    "revoked; ask again if the action is still wanted"
)


def fence_restored_decisions(*, operator=None) -> list[Proposal]:
    """Revoke every released, unconsumed and unexpired decision (one transaction per proposal, each with
    its audit events and its CancelTask). Returns the proposals revoked."""
    label = actor_label(operator) if operator is not None else SYSTEM
    revoked = []
    candidates = Proposal.objects.filter(
        state__in=RELEASED, decision__consumed_at__isnull=True, decision__expires_at__gt=timezone.now()
    ).values_list("pk", flat=True)
    for proposal_id in list(candidates):
        with transaction.atomic(durable=True):
            proposal = Proposal.objects.select_for_update().get(pk=proposal_id)
            if proposal.state not in RELEASED:  # consumed or revoked meanwhile
                continue
            revoke_proposal(proposal, actor=label, reason=RESTORE_REASON, revoked_by=operator)
        revoked.append(proposal)
    return revoked
