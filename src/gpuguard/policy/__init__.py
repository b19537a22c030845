"""Pure decisions: functions of (snapshot, history, ledger, settings, now) returning actions
and findings with reason and evidence. No I/O, no clock.
"""
