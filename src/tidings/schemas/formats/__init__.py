"""Schema formats for the registry: JSON Schema, Avro and Protobuf models, event validation, compatibility.

::

    parse_model(format, text) -> Model        # MalformedSchema when not well formed
    Model.validate(wire_value) -> Violation | None
    Model.canonical                            # equal for duplicates
    check_compatibility(mode, new, previous) -> [Incompatibility]

Everything here is pure (no I/O). A model is immutable once parsed, safe to share between
threads, and pickles as its text (it is parsed again on the other side).

Event data: from ICRC-16 to the instance a schema sees
-------------------------------------------------------

Events carry ICRC-16 wire values (one-key tagged objects). Before validation they are
converted to the plain instance the schema describes; ``Violation.path`` is a path in that
converted instance (``$``, ``$.amount``, ``$.items[2].name``).

=============================================  ==================================  ===================================
ICRC-16 wire value                             JSON Schema instance                Avro datum
=============================================  ==================================  ===================================
``Nat``, ``Int``, ``Nat8``..``Nat64``,         integer                             int (``int``/``long`` check range)
``Int8``..``Int64``
``Float``                                      number (always a float)             float (``float``/``double``, in
                                                                                   range; they accept ints too)
``Text``                                       string                              string (or an ``enum`` symbol)
``Bool``                                       boolean                             boolean
``Principal``                                  string (its text form)              string
``Blob``                                       string: the base64 text as on wire  bytes (``bytes``, ``fixed``)
``Bytes`` (array of 0..255)                    string: base64 of those bytes       bytes (``bytes``, ``fixed``)
``Array``, ``Set``, ``Nats``, ``Floats``       array                               array
``Map`` (``[[key, value], ...]``)              object (a repeated key: last wins)  record or map
``Class`` (``[{name, value, immutable}]``)     object of name → value              record or map
``ValueMap`` (``[[k, v], ...]``)               array of ``[k, v]`` arrays          array of 2-element arrays
``Option`` null / ``Option`` v                 null / v converted                  null / v converted
=============================================  ==================================  ===================================

So an optional field is an ``Option`` (or simply absent); ``{"type": ["null", "string"]}``
and the Avro union ``["null", "string"]`` accept both ``{"Option": null}`` and ``{"Text": "x"}``.

JSON Schema
-----------

* Drafts: ``$schema`` picks draft-04, -06, -07, 2019-09 or 2020-12 (http or https, with
  or without the trailing ``#``); 2020-12 when absent. Any other ``$schema`` is refused.
* ``format`` is asserted in every draft (``"format": "email"`` refuses ``"x"``);
  unknown formats are ignored.
* ``$ref`` must resolve within the schema document: remote references are never fetched
  and make the schema malformed.
* Schema texts nest at most 64 levels of JSON; duplicate keys and NaN are refused.
* Validation uses ``jsonschema_rs``, compiled once per model; a violation is its first
  error, with its message as ``reason``.

Avro
----

* The specification's rules are enforced with locations ("Avro: unknown type 'strng' at
  fields[1].type"): valid and unique names, fields, symbols and union branches, no nested
  unions, defaults matching their type (for a union, any branch, as Avro 1.12 allows);
  fastavro then has the last word (logical types).
* A record is an object: every field must be present unless it has a default or a nullable
  type, and keys the record does not declare are refused (fastavro would ignore them).
  Logical types are checked as their underlying type.
* ``canonical`` is not the Parsing Canonical Form (which drops defaults, docs, aliases):
  it is the full schema with names fully qualified and keys sorted.

Protobuf
--------

* ``.proto`` text (``proto-schema-parser``) or a base64 ``FileDescriptorProto`` (what
  Confluent's serializer sends), built into a private ``DescriptorPool`` with the
  well-known ``google/protobuf`` files, which refuses duplicate numbers, unknown types
  and unresolved imports. Imports from other schemas are given to ``ProtobufModel``
  (``schemas.references`` resolves them). Events are checked against the first message
  by the rules of protobuf's JSON mapping, compiled once per message (``_protobuf_validate``;
  never more lenient than ``json_format.ParseDict``, a few times faster).
* Compatibility follows Confluent's rules (``_protobuf_compat``): ``package-changed``,
  ``message-removed``, ``field-kind-changed``, ``field-scalar-kind-changed``,
  ``field-named-type-changed``, ``field-numeric-label-changed``, ``required-field-added``/
  ``-removed``, ``oneof-field-removed``, ``field-moved-to-oneof``.

Compatibility
-------------

``previous`` is ordered oldest to newest; ``*_TRANSITIVE`` modes compare with every
version, others with the newest. Each :class:`Incompatibility` has a stable ``rule`` and
``version`` (index into ``previous``). Rule codes describe the change from old to new:
BACKWARD problems are narrowings (``type-narrowed``, ``required-added``...), FORWARD
problems widenings (``type-widened``, ``required-removed``...). Codes:

* any format: ``format-changed``.
* Avro: ``type-changed``, ``type-narrowed``/``type-widened`` (promotion the wrong way, a union
  branch the other side cannot read), ``field-added-without-default``/``field-removed``,
  ``enum-symbol-removed``/``enum-symbol-added``, ``union-branch-removed``/``union-branch-added``,
  ``name-mismatch``, ``fixed-size-changed``. Paths look like ``fields.address.fields.zip``,
  ``fields.tags.items``, ``fields.scores.values``; ``$`` is the top level.
* JSON Schema: ``type-changed``, ``type-narrowed``/``type-widened``, ``enum-narrowed``/
  ``enum-widened``, ``required-added``/``required-removed``, ``property-removed``/``property-added``
  (a property a closed object no longer allows), ``additional-properties-closed``/``-opened``,
  ``min-increased``/``min-decreased``, ``max-decreased``/``max-increased``, ``multiple-of-changed``,
  ``min-length-increased``/``-decreased``, ``max-length-decreased``/``-increased``,
  ``min-items-increased``/``-decreased``, ``max-items-decreased``/``-increased``,
  ``min-properties-increased``/``-decreased``, ``max-properties-decreased``/``-increased``,
  ``unique-items-added``/``-removed``, ``pattern-changed``, ``format-changed``, and
  ``unsupported-change`` for what the check cannot prove safe (differing ``anyOf``, ``oneOf``,
  ``allOf``, ``not``, ``if``/``then``/``else``, ``patternProperties``, ``dependencies``,
  ``contains``, ``unevaluated*``, ``propertyNames``, unresolvable or dynamic references).
  Paths look like ``$.properties.address.properties.zip``, ``$.items``, ``$.prefixItems[0]``.
  Local ``$ref`` pointers are followed (recursion included; a reference that leads back to
  itself with no property or item in between is ``unsupported-change``), and a writer with
  finitely many values (``enum``, ``const``, boolean or null types) is checked value by value.
"""

from ._compat import CompatibilityMode, check_compatibility
from ._model import Incompatibility, MalformedSchema, Model, SchemaFormat, Violation
from ._parse import json_canonical, parse_model

__all__ = [
    "CompatibilityMode",
    "Incompatibility",
    "MalformedSchema",
    "Model",
    "SchemaFormat",
    "Violation",
    "check_compatibility",
    "json_canonical",
    "parse_model",
]
