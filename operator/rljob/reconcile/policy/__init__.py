"""The failure policy (pure): which action a failure or finding gets, and the restart ledger."""

from rljob.reconcile.policy.choose import choose_action
from rljob.reconcile.policy.ledger import (
    backoff_seconds,
    record_requested_restart,
    record_restart,
)
from rljob.reconcile.policy.rules import (
    BUILT_IN_RULES,
    ESCALATE_POD_AFTER,
    ESCALATE_ROLE_AFTER,
    EXIT_DO_NOT_REQUEUE,
    RESTART_ACTIONS,
    Decision,
    Failure,
    PolicyContext,
    cooldowns_from_health,
    match_rule,
    rule_matches,
)

__all__ = [
    "BUILT_IN_RULES",
    "ESCALATE_POD_AFTER",
    "ESCALATE_ROLE_AFTER",
    "EXIT_DO_NOT_REQUEUE",
    "RESTART_ACTIONS",
    "Decision",
    "Failure",
    "PolicyContext",
    "backoff_seconds",
    "choose_action",
    "cooldowns_from_health",
    "match_rule",
    "record_requested_restart",
    "record_restart",
    "rule_matches",
]
