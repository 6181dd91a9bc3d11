"""The persistent cache in front of the sources: what a file's header and a hub repo's small
answers were, kept on disk under keys that each name one version (:mod:`.keys`), so that coming back
to a model costs at most one request, and offline mode (:mod:`.offline`) none.

:mod:`.store` keeps the entries (checked, written atomically, evicted least recently used
first); :mod:`.source` puts them in front of a source (:class:`.source.CachedSource`) and holds
the one function a reader calls for the bytes that describe a file,
:func:`.source.read_metadata`. The hub's and HTTP's cached sources live beside their sources
(``hub/cached.py``, ``http/cached.py``). Nothing is re-exported here: import from the module
that owns a name.
"""
