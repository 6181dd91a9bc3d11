"""Hugging Face Hub repos: ``hf://`` locations and their files (:mod:`.repo`), and the hub's
one-call metadata API (:mod:`.api`).

Nothing is re-exported here: import from the module that owns a name.
"""
