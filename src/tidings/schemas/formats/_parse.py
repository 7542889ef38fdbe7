"""From a format and a text to a model."""

from __future__ import annotations

from ._avro import AvroModel
from ._json import JsonModel
from ._jsontext import exact_canonical, load_json
from ._model import MalformedSchema, Model, SchemaFormat
from ._protobuf import ProtobufModel

__all__ = ["json_canonical", "parse_model"]


def parse_model(
    format: SchemaFormat | str, text: str, *, assert_formats: bool = False, stored: bool = False
) -> Model:
    """Parse and check a schema; ``MalformedSchema`` says what is wrong and where.

    JSON Schema: the text must be JSON and valid against the meta-schema ``$schema`` names
    (draft-04, -06, -07, 2019-09 or 2020-12; 2020-12 when absent); every ``$ref`` must
    resolve inside the document, as nothing is ever fetched. Avro: the text must follow the
    Avro specification (names, fields, unions, defaults) and be accepted by fastavro.
    Protobuf: a ``.proto`` file (or a base64 ``FileDescriptorProto``) that imports only the
    well-known types; imports from other schemas go through ``schemas.references``.

    ``stored``: the text is one the registry stored, perhaps under an older tidings's
    rules, and is read by them (an Avro union's default of any branch), so that a schema
    accepted once never becomes unreadable.
    """
    fmt = format if isinstance(format, SchemaFormat) else SchemaFormat.parse(format)
    try:
        if fmt is SchemaFormat.JSON:
            return JsonModel(text, assert_formats=assert_formats)
        if fmt is SchemaFormat.PROTOBUF:
            return ProtobufModel(text)
        return AvroModel(text, stored=stored)
    except RecursionError:
        raise MalformedSchema("the schema nests too deeply") from None


def json_canonical(text: str) -> str:
    """A JSON Schema text's canonical form, as ``parse_model`` gives it, without the checks."""
    load_json(text)  # the same checks: MalformedSchema
    return exact_canonical(text)
