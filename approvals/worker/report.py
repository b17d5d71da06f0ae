"""What one run of the worker's jobs did (a single tick adds every job's counts into one report)."""

from dataclasses import dataclass, field


@dataclass
class TickReport:
    expired: int = 0
    delivered: int = 0
    failed: int = 0
    dead: int = 0
    reconciled: int = 0
    errors: list[str] = field(default_factory=list)
