"""The published privacy statement of a release: its data, built from the ledger (``build``), the prose it
quotes (``prose``) and its rendering for people (``markdown``)."""
