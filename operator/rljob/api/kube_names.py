"""Grammars of the Kubernetes names and references an RLJob copies into its pods: image
references, label keys and values, environment variable names. Each is checked by the API server
on the RLJob (CEL or pattern) and by the model, so a bad value is refused before any child exists.

Patterns used in CEL carry no backslash (a CEL string literal would read it as an escape) and
[0-9], never \\d: RE2 (CEL and OpenAPI), Rust (pydantic) and Python agree on them."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated

from pydantic import Field

from rljob.api.rules import CelCheck

# distribution/reference: [host[:port]/]path[:tag][@sha256:digest]; a host component may hold
# upper case, a path component may not. No IPv6 host literals: brackets are unsafe in CEL.
_HOST_COMPONENT = "[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?"
_REGISTRY = f"{_HOST_COMPONENT}([.]{_HOST_COMPONENT})*(:[0-9]+)?"
_PATH_COMPONENT = "[a-z0-9]+(([_.]|__|-+)[a-z0-9]+)*"
_TAG = "[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = "sha256:[a-f0-9]{64}"
IMAGE_PATTERN = f"^({_REGISTRY}/)?{_PATH_COMPONENT}(/{_PATH_COMPONENT})*(:{_TAG})?(@{_DIGEST})?$"
# A repository name of at most 255 (the registry's limit), a tag and a digest fit.
IMAGE_MAX_LENGTH = 512
IMAGE_MESSAGE = (
    "must be an image reference [host[:port]/]path[:tag][@sha256:<64 lowercase hex>]: a path of "
    "lowercase components (a-z 0-9 joined by '.', '_', '__' or '-') separated by '/', a tag of "
    "at most 128 of A-Z a-z 0-9 _ . - not starting with '.' or '-', no spaces"
)

# A label key (IsQualifiedName): an optional DNS-subdomain prefix of at most 253 characters and
# '/', then a name of at most 63; the regex bounds the name, indexOf('/') the prefix.
QUALIFIED_NAME_PATTERN = (
    "^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    "[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
QUALIFIED_NAME_PREFIX_MAX_LENGTH = 253
QUALIFIED_NAME_MAX_LENGTH = QUALIFIED_NAME_PREFIX_MAX_LENGTH + 1 + 63
LABEL_KEY_SHAPE = (
    "an optional DNS subdomain prefix (at most 253 of a-z 0-9 - .) and '/', then a name of at "
    "most 63 of A-Z a-z 0-9 - _ . that starts and ends with a letter or digit"
)

LABEL_VALUE_PATTERN = "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_VALUE_MAX_LENGTH = 63

ENV_NAME_PATTERN = "^[-._a-zA-Z][-._a-zA-Z0-9]*$"
ENV_NAME_MESSAGE = (
    "must be an environment variable name: letters, digits, '_', '-' or '.', not starting "
    "with a digit"
)


def qualified_name_cel(variable: str) -> str:
    """The CEL test that `variable` (self, or a map key in a comprehension) is a label key."""
    return (
        f"{variable}.matches('{QUALIFIED_NAME_PATTERN}')"
        f" && {variable}.indexOf('/') <= {QUALIFIED_NAME_PREFIX_MAX_LENGTH}"
    )


def is_qualified_name(text: str) -> bool:
    return (
        re.fullmatch(QUALIFIED_NAME_PATTERN, text) is not None
        and text.find("/") <= QUALIFIED_NAME_PREFIX_MAX_LENGTH
    )


def _fullmatch(pattern: str) -> Callable[[str], bool]:
    return lambda text: re.fullmatch(pattern, text) is not None


ImageRef = Annotated[
    str,
    Field(min_length=1, max_length=IMAGE_MAX_LENGTH),
    CelCheck(
        cel=f"self.matches('{IMAGE_PATTERN}')",
        message=IMAGE_MESSAGE,
        holds=_fullmatch(IMAGE_PATTERN),
    ),
]
"""A container image reference such as registry.example.com/team/rl:1.4."""

LabelKeyOrEmpty = Annotated[
    str,
    Field(max_length=QUALIFIED_NAME_MAX_LENGTH),
    CelCheck(
        cel=f"self == '' || ({qualified_name_cel('self')})",
        message=f"must be empty or a label key: {LABEL_KEY_SHAPE}",
        holds=lambda key: key == "" or is_qualified_name(key),
    ),
]
"""A label key (or taint key), or empty."""

LabelValue = Annotated[str, Field(pattern=LABEL_VALUE_PATTERN, max_length=LABEL_VALUE_MAX_LENGTH)]
"""A label value: at most 63 of A-Z a-z 0-9 - _ ., starting and ending alphanumeric; may be
empty."""

MAX_NODE_SELECTOR_ENTRIES = 32
NodeSelector = Annotated[
    dict[str, LabelValue],
    Field(max_length=MAX_NODE_SELECTOR_ENTRIES),
    # Map keys have no schema of their own: one rule over the map checks them all.
    CelCheck(
        cel=f"self.all(key, {qualified_name_cel('key')})",
        message=f"must be keyed by label keys: {LABEL_KEY_SHAPE}",
        holds=lambda selector: all(is_qualified_name(key) for key in selector),
    ),
]
"""Node labels a pod requires: label keys to label values."""

EnvName = Annotated[
    str,
    Field(min_length=1, max_length=256),
    CelCheck(
        cel=f"self.matches('{ENV_NAME_PATTERN}')",
        message=ENV_NAME_MESSAGE,
        holds=_fullmatch(ENV_NAME_PATTERN),
    ),
]
"""An environment variable name, as the pod API accepts it."""
