"""The vocabulary's enums as pydantic field types: spec models are strict, and strict pydantic only
takes enum instances, so these aliases take the plain strings that YAML and JSON carry."""

from __future__ import annotations

from typing import Annotated

from pydantic import Strict

from rljob.vocabulary.enums import (
    AddressingStyle,
    Engine,
    EngineExporter,
    FailureAction,
    FailureReason,
    GenerationFrom,
    Launcher,
    RoleName,
    WeightSync,
)

RoleNameField = Annotated[RoleName, Strict(False)]
EngineField = Annotated[Engine, Strict(False)]
LauncherField = Annotated[Launcher, Strict(False)]
EngineExporterField = Annotated[EngineExporter, Strict(False)]
WeightSyncField = Annotated[WeightSync, Strict(False)]
GenerationFromField = Annotated[GenerationFrom, Strict(False)]
FailureReasonField = Annotated[FailureReason, Strict(False)]
FailureActionField = Annotated[FailureAction, Strict(False)]
AddressingStyleField = Annotated[AddressingStyle, Strict(False)]
