"""The goodput benchmark: one simulated RL job run three ways (the operator with its defaults, the
operator mapping every finding to a restart of all roles, a JobSet restarting everything) against
one failure trace (`trace`), compared by effective training time."""
