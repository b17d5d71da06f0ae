"""Helpers every app of ours uses (in the manner of healthchecks' hc/lib). Nothing here imports an app."""
