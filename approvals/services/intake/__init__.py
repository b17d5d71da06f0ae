"""Intake: an agent's proposal taken in, in one transaction.

`submit_proposal` (submit.py) validates the request, takes the tenant's and the agent's quota rows'
lock and reads everything it decides on in one round trip (read.py), asks the quotas
(approvals/services/quotas.py, the one home of that rule), lets policy decide, and stores and routes
the proposal (routing.py). `record_intake_refusal` leaves a trace of a refused request and spends the
quotas' rates for it, as for a proposal;
`evaluate_and_route` routes a reviewer's edit as intake routes a new proposal.
"""

from approvals.services.intake.routing import evaluate_and_route
from approvals.services.intake.submit import Taken, record_intake_refusal, submit_proposal, take_in

__all__ = ["Taken", "evaluate_and_route", "record_intake_refusal", "submit_proposal", "take_in"]
