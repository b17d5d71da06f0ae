"""Queue metrics computed from the audit log (`queue`), drawn as SVG charts (`charts`) and exposed to
Prometheus (`prometheus`): aggregates only, no personal identifiers."""
