"""From a format and a text to a model."""

from __future__ import annotations

from ._avro import AvroModel
from ._json import JsonModel
from ._model import MalformedSchema, Model, SchemaFormat

__all__ = ["parse_model"]


def parse_model(format: SchemaFormat | str, text: str, *, assert_formats: bool = False) -> Model:
    """Parse and check a schema; ``MalformedSchema`` says what is wrong and where.

    JSON Schema: the text must be JSON and valid against the meta-schema ``$schema`` names
    (draft-04, -06, -07, 2019-09 or 2020-12; 2020-12 when absent); every ``$ref`` must
    resolve inside the document, as nothing is ever fetched. Avro: the text must follow the
    Avro specification (names, fields, unions, defaults) and be accepted by fastavro.
    """
    fmt = format if isinstance(format, SchemaFormat) else SchemaFormat.parse(format)
    try:
        if fmt is SchemaFormat.JSON:
            return JsonModel(text, assert_formats=assert_formats)
        return AvroModel(text)
    except RecursionError:
        raise MalformedSchema("the schema nests too deeply") from None
