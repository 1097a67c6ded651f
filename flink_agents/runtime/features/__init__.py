"""Features on top of the record loop: callbacks, steering, progress, conversations, sub-agents."""
