"""Rules that compare an update with the stored object: the Python side of the CRD's transition
rules (CEL `oldSelf`), which the API server checks on every update."""

from __future__ import annotations

from rljob.api.base import SpecModel
from rljob.api.rules import FieldViolation, Immutable, field_path
from rljob.api.spec import RLJobSpec


def validate_update(old: RLJobSpec, new: RLJobSpec) -> list[FieldViolation]:
    """Violations of an update from `old` to `new` (paths from the object root, e.g.
    spec.checkpoint.uri); empty when the API server would accept it."""
    return _transition_violations(old, new, ("spec",))


def _transition_violations(
    old: SpecModel, new: SpecModel, loc: tuple[str, ...]
) -> list[FieldViolation]:
    violations = [
        FieldViolation(field_path(loc + rule.loc), rule.message)
        for rule in type(new).transition_rules
        if not rule.holds(old, new)
    ]
    for name, info in type(new).model_fields.items():
        old_value, new_value = getattr(old, name), getattr(new, name)
        if old_value is None or new_value is None:
            continue  # like CEL: a transition rule runs only where both versions have the field
        child_loc = (*loc, info.alias or name)
        for marker in info.metadata:
            if isinstance(marker, Immutable) and old_value != new_value:
                violations.append(FieldViolation(field_path(child_loc), marker.message))
        if isinstance(new_value, SpecModel) and isinstance(old_value, SpecModel):
            violations.extend(_transition_violations(old_value, new_value, child_loc))
    return violations
