"""The failure policy: user rules, the restart budget and backoff, and how long a node stays
suspect after hardware-like evidence."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from rljob.api.base import SpecModel, nested
from rljob.api.durations import Duration, duration_nanoseconds, durations_in_order
from rljob.api.enum_fields import FailureActionField, FailureReasonField, RoleNameField
from rljob.api.rules import CelCheck, CrossFieldRule, KubeList
from rljob.vocabulary.enums import FailureAction, FailureReason, RoleName

MAX_RESTARTS_LIMIT = 100
MAX_FAILURE_RULES = 32
SUSPECT_NODE_TTL_MIN = "1m"
SUSPECT_NODE_TTL_MAX = "168h"
DEFAULT_SUSPECT_NODE_TTL = "6h"


def _ttl_in_bounds(value: str) -> bool:
    low, high = (
        duration_nanoseconds(SUSPECT_NODE_TTL_MIN),
        duration_nanoseconds(SUSPECT_NODE_TTL_MAX),
    )
    return low <= duration_nanoseconds(value) <= high


# Long enough to outlast the restart that marked the node, short enough that a node repaired
# (or wrongly suspected) is used again without anyone clearing the status by hand.
SuspectNodeTTL = Annotated[
    Duration,
    CelCheck(
        cel=f"duration(self) >= duration('{SUSPECT_NODE_TTL_MIN}') && "
        f"duration(self) <= duration('{SUSPECT_NODE_TTL_MAX}')",
        message=f"must be between {SUSPECT_NODE_TTL_MIN} and {SUSPECT_NODE_TTL_MAX}",
        holds=_ttl_in_bounds,
    ),
]


class Backoff(SpecModel):
    """Exponential delay between restarts; the first restart in a window has none."""

    initial: Duration = Field(default="30s", description="Delay before the second restart.")
    max: Duration = Field(default="30m", description="Upper bound of the delay.")

    cel_rules = (
        durations_in_order(
            "initial", "max", field="initial", message="initial must not exceed max"
        ),
    )


class FailureRule(SpecModel):
    """Maps failures to an action; a rule matches when every matcher it sets matches."""

    roles: (
        Annotated[list[RoleNameField], Field(min_length=1, max_length=4), KubeList("set")] | None
    ) = Field(default=None, description="Roles the rule applies to; default: all.")
    on_reasons: (
        Annotated[
            list[FailureReasonField],
            Field(min_length=1, max_length=len(FailureReason)),
            KubeList("set"),
        ]
        | None
    ) = Field(default=None, description="Failure reasons that match.")
    on_exit_codes: (
        Annotated[
            list[Annotated[int, Field(ge=0, le=255)]],
            Field(min_length=1, max_length=32),
            KubeList("set"),
        ]
        | None
    ) = Field(default=None, description="Container exit codes that match.")
    action: FailureActionField = Field(
        description="What to do when the rule matches (RestartRoleInTurn: serving roles only; "
        "RestartJob: the trainer gang restarted from its latest checkpoint and every serving "
        "role rolled, whichever role failed)."
    )
    counts_towards_max: bool = Field(
        default=True, description="Whether a restart by this rule uses up maxRestarts."
    )

    cel_rules = (
        CrossFieldRule(
            cel="!has(self.onReasons) || !has(self.onExitCodes)",
            message="a rule matches onReasons or onExitCodes, not both",
            field="onExitCodes",
            holds=lambda rule: rule.on_reasons is None or rule.on_exit_codes is None,
        ),
        # The trainer's ranks restart together; a rule without roles applies it to serving roles.
        CrossFieldRule(
            cel=f"self.action != '{FailureAction.RESTART_ROLE_IN_TURN.value}' || "
            "!has(self.roles) || !('trainer' in self.roles)",
            message="RestartRoleInTurn restarts a serving role (rollout, reference, verifier) "
            "one pod at a time; the trainer restarts as a gang (RestartTrainerGang)",
            field="roles",
            holds=lambda rule: (
                rule.action != FailureAction.RESTART_ROLE_IN_TURN
                or rule.roles is None
                or RoleName.TRAINER not in rule.roles
            ),
        ),
    )


class FailurePolicy(SpecModel):
    """How failures are handled: user rules first, then built-in defaults; first match wins."""

    max_restarts: int = Field(
        default=10,
        ge=0,
        le=MAX_RESTARTS_LIMIT,
        description="Counted restarts allowed within window before the job fails.",
    )
    window: Duration = Field(default="24h", description="Sliding window of maxRestarts.")
    backoff: Backoff = nested(Backoff, "Delay between restarts.")
    no_progress_restarts: int = Field(
        default=3,
        ge=1,
        le=MAX_RESTARTS_LIMIT,
        description="Gang restarts in a row resuming from the same step before the job fails.",
    )
    teardown_timeout: Duration = Field(
        default="10m",
        description="How long a gang restart waits for the old attempt's pods to go.",
    )
    node_lost_timeout: Duration = Field(
        default="1m",
        description="How long a trainer rank's node may stay unreachable (Ready Unknown: its "
        "kubelet stopped reporting) before the rank counts as lost and the gang restarts "
        "(NodeLost); a Node object gone is lost at once. Kubernetes marks a node Unknown after "
        "--node-monitor-grace-period (50s by default) without a report.",
    )
    action_timeout: Duration = Field(
        default="30m",
        description="How long a role restart (in turn, or a roll) may go without progress (a turn "
        "taken, the role ready again) before the operator stops waiting for it and says so; a "
        "drain under way is bounded by drainTimeout instead. A repair of the trainer ends it "
        "sooner, once it sent what it decided.",
    )
    suspect_node_ttl: SuspectNodeTTL = Field(
        default=DEFAULT_SUSPECT_NODE_TTL,
        alias="suspectNodeTTL",
        description="How long a node stays in status.suspectNodes after hardware-like evidence "
        "on it (GPU hardware error, NCCL network error on the root-cause rank, node lost): new "
        "trainer attempts prefer other nodes until then.",
    )
    rules: Annotated[list[FailureRule], Field(max_length=MAX_FAILURE_RULES)] = Field(
        default_factory=list, description="User rules, tried before the built-in ones."
    )
