"""Run once after restoring the database from a backup, before Daphne and the workers start.

    manage.py fence_restored_decisions [--operator USERNAME]

Revokes every released decision that is not consumed and not yet expired (approvals/services/restore.py
says why): a decision consumed after the backup was taken can never be consumed a second time.
"""

from approvals.management.commands._base import OperatorCommand, cancel_note
from approvals.services.restore import fence_restored_decisions


class Command(OperatorCommand):
    help = (
        "After a restore from a backup: revoke every released, unconsumed, unexpired decision, so none can "
        "be consumed a second time; CancelTask is queued for their tasks."
    )

    def add_arguments(self, parser):
        self.add_operator_argument(parser, "restoring")

    def handle(self, *args, **options):
        revoked = self.call_service(fence_restored_decisions, operator=self.operator(options))
        self.stdout.write(
            f"{len(revoked)} released, unconsumed decision(s) revoked; "
            + cancel_note(sum(1 for proposal in revoked if not proposal.agent.is_pull), len(revoked))
        )
        for proposal in revoked:
            self.stdout.write(
                f"  proposal {proposal.id} of tenant {proposal.tenant_id}"
            )  # no agent text on a terminal
