from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # The dependency points from approvals to audit: audit's evidence packet gets the proposal's
        # envelope, decision and deliveries from here without importing approvals.
        from approvals.evidence import proposal_record
        from audit.exports.evidence import provide_proposal_records

        provide_proposal_records(proposal_record)

        # A committed decision is sent by the process that committed it (approvals/worker/delivery.py).
        from approvals import wakeup
        from approvals.worker.delivery import send_after_commit

        wakeup.register_direct_sender(send_after_commit)

        # A proposal page's message carries its parts, rendered by the committing process; the open
        # pages hear of every change to their people's access (approvals/live/).
        from approvals import events
        from approvals.live import broadcast, invalidation

        events.render_messages_with(broadcast.rendered_message)
        invalidation.connect()
