"""The hand-written SQL of approvals: each statement a measured exception to the ORM, behind one door."""
