"""Demo A2A refund agent: asks Reviewer before each refund and acts only on a verified decision.

Run it with `python -m examples.refund_agent --help`; examples/README.md explains the flow.
"""
