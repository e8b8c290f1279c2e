"""The OpenAPI document: FastAPI's, plus what it cannot infer from the routes."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from trainfleet.spec.models import JobSpec
from trainfleet.wire import ErrorBody


def document(app: FastAPI) -> dict[str, Any]:
    """The app's document, made once."""
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title, version=app.version, summary=app.summary, routes=app.routes
        )
        _add_models(schema, JobSpec, ErrorBody)
        _absent_not_null(schema)
        app.openapi_schema = schema
    return app.openapi_schema


def _add_models(schema: dict[str, Any], *models: type[BaseModel]) -> None:
    """Add models that routes name by reference to the document's components: JobSpec (a
    submission's JSON body, read by hand) and ErrorBody (every error answer)."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in models:
        model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(model_schema.pop("$defs", {}))
        components[model.__name__] = model_schema


def _absent_not_null(schema: dict[str, Any]) -> None:
    """An optional parameter is left out, never sent as null: drop ``null`` from its type.

    A header or query string cannot carry JSON null; clients that read ``anyOf: [integer,
    null]`` would send the text ``null``, which is no integer.
    """
    for operation in (op for path in schema["paths"].values() for op in path.values()):
        for parameter in operation.get("parameters", []):
            options = parameter["schema"].get("anyOf", [])
            kept = [option for option in options if option.get("type") != "null"]
            if not parameter.get("required") and len(kept) == 1 and len(options) == 2:
                del parameter["schema"]["anyOf"]
                parameter["schema"].update(kept[0])
