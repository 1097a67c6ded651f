"""Agents written with agent frameworks, run durably inside actions.

One module per framework, each an optional extra (``docs/frameworks.md``):

- ``pydantic_ai`` (``pip install 'flink-agents-runtime[pydantic-ai]'``)
- ``openai_agents`` (``[openai-agents]``)
- ``langgraph`` (``[langgraph]``)
- ``google_adk`` (``[google-adk]``)

Shared by all: ``durable_turn`` (journaled model requests and tool calls of
one framework turn) and ``conversation`` (a key's framework conversation in
short-term memory).
"""
