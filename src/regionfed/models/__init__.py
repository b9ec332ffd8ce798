"""Models and tasks: every model is reached through a :class:`regionfed.models.tasks.Task`."""
