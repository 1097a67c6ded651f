from flink_agents.api.tools.tool import FunctionTool, Tool, ToolMetadata, ToolType

__all__ = ["FunctionTool", "Tool", "ToolMetadata", "ToolType"]
