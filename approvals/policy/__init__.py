"""Policy as pure functions: evaluation, validation of a version, the dry run, classification, the
history counts and the break-glass rule. Reads models; writes nothing."""
