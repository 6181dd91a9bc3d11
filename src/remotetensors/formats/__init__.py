"""Sans-IO file formats: bytes in, frozen index values out. No network, no asyncio."""
