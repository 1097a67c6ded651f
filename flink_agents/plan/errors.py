"""Errors raised while compiling an agent into a plan."""

__all__ = ["PlanError"]


class PlanError(ValueError):
    """The agent cannot be compiled; the message names the action or resource."""
