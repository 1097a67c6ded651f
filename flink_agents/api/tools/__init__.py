from flink_agents.api.tools.function_tool import FunctionTool
from flink_agents.api.tools.tool import Tool, ToolMetadata, ToolType

__all__ = ["FunctionTool", "Tool", "ToolMetadata", "ToolType"]
