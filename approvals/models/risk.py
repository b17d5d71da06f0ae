"""The risk levels a policy gives a proposal, and the one rank every comparison of them uses.

Risk is a label a policy version carries (`PolicyVersion.risk`) and a proposal inherits from the
versions that decided it (`Proposal.risk`). Two things compare levels, and both read `rank()`:

- the queue (`Proposal.risk_rank`, kept by `save()`): among proposals that expire at the same moment,
  the riskier first;
- the merge of several matching versions (`riskiest()`, policy/evaluation.py): the proposal takes the
  highest-ranked level among them.

"Not rated" ranks with medium, not below low: nobody said the action is low risk, so it neither sinks
to the bottom of the queue nor lets one version's "low" speak for another version that did not rate it
(fail closed). A label this list does not know (a value written before validation, a typo in the
database) ranks as high: unknown risk sorts up, not down. On a tie the rated level is kept, so
"medium" and "not rated" merge to "medium".
"""

from collections.abc import Iterable

from django.db import models


class Risk(models.TextChoices):
    NOT_RATED = "", "not rated"
    LOW = "low", "low"
    MEDIUM = "medium", "medium"
    HIGH = "high", "high"


RANKS: dict[str, int] = {Risk.LOW: 1, Risk.MEDIUM: 2, Risk.NOT_RATED: 2, Risk.HIGH: 3}
UNKNOWN_RANK = 3
# The rated levels, riskiest first: the order the queue's filter and its counts list them in.
RATED_RISKIEST_FIRST = (Risk.HIGH, Risk.MEDIUM, Risk.LOW)


def rank(risk: str) -> int:
    return RANKS.get((risk or "").strip().lower(), UNKNOWN_RANK)


def riskiest(risks: Iterable[str]) -> str:
    """The level that ranks highest among `risks` (the rated one on a tie); "" for none."""
    return max(risks, key=lambda risk: (rank(risk), risk != Risk.NOT_RATED), default=Risk.NOT_RATED)
