"""Byte sources: the only code that does IO. A source reads bytes; it never parses them."""
