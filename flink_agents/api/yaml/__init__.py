"""YAML agents: agents, actions, prompts, tools and resources declared in
YAML and bound to Python functions (Flink Agents 0.3.1's declarative API).

``AgentsExecutionEnvironment.load_yaml(paths)`` is the usual entry point;
``flink_agents.api.yaml.loader``, ``.specs`` and ``.aliases`` hold the
loader, the file format and the short names. See docs/yaml_agents.md.
"""
