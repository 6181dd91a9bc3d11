"""HTTP(S) files: the source that reads them, and the two ways its requests travel.

- :mod:`.source`: :class:`~.source.HttpSource`, one file read with single-range GETs: the
  attempts, retries, resumes, the throughput floor and the deadline, and one request path;
- :mod:`.answer`: what an answer means (:func:`~.answer.decide`, no IO);
- :mod:`.pin`: the version opened, the conditions sent, the check of later answers;
- :mod:`.transport`: what a transport does (one GET: its head, then its body into a buffer);
- :mod:`.via_direct` and :mod:`.via_httpx`: the two transports;
- :mod:`.direct`: the built-in HTTP/1.1 reader whose bodies land in the caller's buffer;
- :mod:`.head`: the bytes of request and response heads, by h11's rules (no IO);
- :mod:`.client`: :class:`~.client.HttpOptions`, and the client that files share;
- :mod:`.tls`: the CAs trusted (one context per bundle), and what a failed handshake means
  (:class:`~remotetensors.errors.TlsError`, never retried); :mod:`.selfcancel`: bounds on an
  await.

Nothing is re-exported here: import from the module that owns a name.
"""
