from flink_agents.plan.agent_plan import ActionSpec, AgentPlan, ResourceKind, ResourceSpec
from flink_agents.plan.errors import PlanError
from flink_agents.plan.function_ref import FunctionRef

__all__ = ["ActionSpec", "AgentPlan", "FunctionRef", "PlanError", "ResourceKind", "ResourceSpec"]
