"""The global id of an interchain event as a Spark ``Column``.

The rule is :mod:`tidings.core.global_id`; this module writes it in Spark SQL from the
core's constants, so Python and Spark derive the same id (``tests/test_global_id_spark.py``
compares them over generated strings). Where Python raises (no ``hl``, or one that is
not UTF-8 once decoded), the column is NULL.

How each step maps onto Spark:

* the fragment and the query: ``substring_index`` and ``instr``;
* the parameters: ``split`` (the separator quoted for Java's regular expressions), the
  first match found with ``filter`` and ``try_element_at``;
* percent-decoding: ``try_url_decode`` (``java.net.URLDecoder``: ``+`` is a space,
  ``%XX`` a byte, bytes decoded as UTF-8) after each lone ``%`` is spelled ``%25``,
  which is what Python's rule does with it;
* UTF-8 validity: the JVM replaces malformed bytes with U+FFFD, at least one per
  malformed part, so the decoded value is valid exactly when it holds no more U+FFFD
  than the input spelled (the character itself, or ``%EF%BF%BD``).

One SQL expression parsed once by ``F.expr`` (as :mod:`tidings.pipeline.filters` does);
values computed once are bound with ``transform(array(x), v -> ...)[0]``.
"""

from __future__ import annotations

import re

from pyspark.sql import Column
from pyspark.sql import functions as F

from tidings.core.global_id import (
    FRAGMENT,
    GLOBAL_ID_PARAM,
    LONE_PERCENT,
    NAME_SEPARATOR,
    PARAM_SEPARATOR,
    QUERY,
    REPLACEMENT,
    REPLACEMENT_ESCAPE,
)

__all__ = ["global_id_column", "global_id_sql"]


def _string(s: str) -> str:
    """A Spark SQL string literal (backslash escapes: Spark's default parser setting)."""
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _decode(sql: str) -> str:
    """Form-decode a SQL string expression the way :func:`tidings.core.global_id.percent_decode` does."""
    return f"try_url_decode(regexp_replace({sql}, {_string(LONE_PERCENT)}, '%25'))"


def _count(sql: str, char: str) -> str:
    return f"(length({sql}) - length(replace({sql}, {_string(char)}, '')))"


def global_id_sql(data_location: str) -> str:
    """The rule as a Spark SQL expression over ``data_location`` (a SQL string expression)."""
    frag, query, eq = map(_string, (FRAGMENT, QUERY, NAME_SEPARATOR))
    after_eq = f"substr(__gid_p, instr(__gid_p, {eq}) + 1)"
    sep = _string(re.escape(PARAM_SEPARATOR))  # split takes a Java regular expression
    params = (f"CASE WHEN instr(__gid_loc, {query}) > 0 "
              f"THEN split(substr(__gid_loc, instr(__gid_loc, {query}) + 1), {sep}, -1) "
              "ELSE cast(array() AS array<string>) END")
    wanted = (f"instr(__gid_p, {eq}) > 0 AND length({after_eq}) > 0 "
              f"AND {_decode(f'substring_index(__gid_p, {eq}, 1)')} = {_string(GLOBAL_ID_PARAM)}")
    raw = f"substr(__gid_v, instr(__gid_v, {eq}) + 1)"
    spelled = f"({_count(raw, REPLACEMENT)} + regexp_count({raw}, {_string(REPLACEMENT_ESCAPE)}))"
    checked = f"CASE WHEN {_count('__gid_d', REPLACEMENT)} = {spelled} THEN __gid_d END"
    value = f"transform(array({_decode(raw)}), __gid_d -> {checked})[0]"
    hit = f"try_element_at(filter({params}, __gid_p -> {wanted}), 1)"
    return (f"transform(array(substring_index({data_location}, {frag}, 1)), __gid_loc -> "
            f"transform(array({hit}), __gid_v -> {value})[0])[0]")


def global_id_column(data_location: Column | str) -> Column:
    """A string column: the global id of the event whose ``dataLocation`` is ``data_location``
    (a column or a column's name), NULL where it has none."""
    if isinstance(data_location, str):
        return F.expr(global_id_sql(f"`{data_location.replace('`', '``')}`"))
    return F.call_function("transform", F.array(data_location),
                           F.expr(f"__gid_in -> {global_id_sql('__gid_in')}"))[0]
