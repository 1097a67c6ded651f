"""MCP servers for the MCP tests, written with the ``mcp`` SDK's server side.

``review_tools.build_server`` defines the tools and prompts; ``stdio_server``
serves them over stdio (a script the client launches with
``sys.executable``); ``http_server`` over streamable HTTP on 127.0.0.1.
"""
