"""Offline verification of exported chains (`python -m audit.verify`, or `reviewer-verify` from the
reviewer-verify package, which is this folder: sdk/verify/). No Django here, and only relative imports
within the folder, so the package can install it under its own name."""
