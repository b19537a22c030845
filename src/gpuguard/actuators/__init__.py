"""Write adapters: node patches (cordon + annotations in one request), Jobs, ledger, Events,
notifications.
"""
