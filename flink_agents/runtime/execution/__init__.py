"""A record's run: the Run object, the action loop, the context, memory, KeyState, the apply step."""
