"""Offline verification of exported chains (`python -m audit.verify`, audit/verify/cli.py). No Django here."""
