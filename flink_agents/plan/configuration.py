"""Flink Agents 0.3.1's ``flink_agents.plan.configuration`` import path.

0.3.1 keeps its concrete configuration here as ``AgentConfiguration``; this
runtime's is ``flink_agents.api.configuration.Configuration``, which this
module names under 0.3.1's name so code importing it keeps working.
"""

from __future__ import annotations

from flink_agents.api.configuration import Configuration, flatten_dict

__all__ = ["AgentConfiguration", "flatten_dict"]


class AgentConfiguration(Configuration):
    """0.3.1's name of the writable configuration (``Configuration``):
    ``AgentConfiguration(conf_data)``, ``load_from_file(path)``,
    ``get_conf_data()``, ``get_config_data_by_prefix(prefix)`` and the
    typed ``get_*``/``set_*`` methods."""
