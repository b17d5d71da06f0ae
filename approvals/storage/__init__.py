"""Hand-written SQL that a benchmark row measured the ORM too slow for, each statement beside its reason."""
