"""HTTP(S) files: the source that reads them, and the two ways its requests travel.

- :mod:`.source`: :class:`~.source.HttpSource`, one file read with single-range GETs
  (attempts, retries, resumes, the throughput floor and the deadline);
- :mod:`.client`: :class:`~.client.HttpOptions` and the client files share;
- :mod:`.direct`: the built-in HTTP/1.1 reader whose bodies land in the caller's buffer;
- :mod:`.head`: the bytes of request and response heads, by h11's rules (no IO);
- :mod:`.tls`: one TLS context per process; :mod:`.selfcancel`: bounds on an await.

Nothing is re-exported here: import from the module that owns a name.
"""
