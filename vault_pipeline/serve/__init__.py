"""Serving the vault where the user's model is: the MCP server and the live index.

``tools`` holds what the server offers as plain library calls (query, search, read_note,
remember, status), ``remember`` writes provisional notes from a client's text, ``watch`` keeps
the index in step with the files, and ``mcp`` puts the tools on the Model Context Protocol.
Only ``mcp`` imports the MCP SDK and only ``watch`` imports watchfiles, both lazily from
``cli/``, so ``vault --help`` stays fast.
"""
