"""``gpuguard audit``'s rules: pure functions over one ``model.audit.AuditView``
(docs/audit.md).

Each rule is one entry in ``catalogue.RULES``: an ID, a title, the inputs it needs, the public
source behind it, the fix, and a check returning hits (or ``NotChecked`` with the reason).
``registry.run`` runs them all; a rule whose input could not be read is "not checked (why)",
never a pass.
"""
