"""Integrations with other libraries (Dask). Imported only by the command line and the public
face; values reach them through :mod:`remotetensors.hooks`."""
