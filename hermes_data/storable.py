"""Text the databases can store (issue 31): the one check both stores' write paths make,
and the translation of the drivers' own refusals into :class:`UnstorableValueError`.

The rule, the same on SQLite and PostgreSQL: a text value stored *verbatim* (an id, a key,
a role, a source, a model name, a ``state_meta`` value …) must be encodable in UTF-8 — no
lone surrogate — and must not contain NUL (PostgreSQL ``text`` cannot hold it; SQLite could,
but a value one backend refuses would make ``hermes-data copy`` fail half-way, so both
refuse it). Values the stores *encode* keep their documented encodings: message ``content``
(lone surrogates → U+FFFD, NUL kept losslessly, docs/sessions.md §6.1), titles
(:func:`~hermes_data.sessions.core.encoding.sanitize_title`) and every telemetry text field
(lone surrogates and NUL → U+FFFD, docs/telemetry.md).

The check is a fast path for the common case (``"\\x00" not in s and s.isascii()``, two C
scans) and one ``str.encode`` attempt otherwise — never a Python loop per character.
"""

from __future__ import annotations

from typing import Any, Iterable, overload

from hermes_data.errors import UnstorableValueError

__all__ = ["UnstorableValueError", "check_text", "check_texts", "from_driver_error",
           "is_storable", "no_row_holds", "problem", "searchable"]

_SURROGATE = "contains a lone surrogate (UTF-8 cannot encode it)"
_NUL = "contains NUL (\\x00), which PostgreSQL text cannot hold (refused on both backends)"


def is_storable(value: str) -> bool:
    """True when ``value`` holds neither NUL nor a lone surrogate."""
    return problem(value) is None


def no_row_holds(value: Any) -> bool:
    """True for a string no stored row can hold (NUL or a lone surrogate): a read by such a
    key answers "not found" without asking the database."""
    return isinstance(value, str) and not is_storable(value)


def problem(value: str) -> str | None:
    """Why ``value`` cannot be stored, or None when it can."""
    if "\x00" in value:
        return _NUL
    if value.isascii():
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE
    return None


def check_text(argument: str, value: Any) -> None:
    """Raise :class:`UnstorableValueError` naming ``argument`` when ``value`` is a string
    that cannot be stored; anything else (None, numbers, bytes) passes."""
    if isinstance(value, str) and not is_storable(value):
        raise UnstorableValueError(argument, value, problem(value) or "")


def check_texts(pairs: Iterable[tuple[str, Any]]) -> None:
    """:func:`check_text` over ``(argument, value)`` pairs, in order."""
    for argument, value in pairs:
        check_text(argument, value)


def searchable(text: str) -> str:
    """``text`` with what no stored value can contain replaced: each lone surrogate by U+FFFD
    (the character the stores scrub them to) and NUL by a space — a search never raises
    for its query text."""
    if text.isascii():
        return text.replace("\x00", " ") if "\x00" in text else text
    if "\x00" in text:
        text = text.replace("\x00", " ")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def _params_of(exc: BaseException) -> Any:
    params = getattr(exc, "params", None)
    if isinstance(params, dict):
        return list(params.items())
    if isinstance(params, (list, tuple)):
        if params and isinstance(params[0], (list, tuple, dict)):  # executemany
            params = [p for row in params for p in (row.values() if isinstance(row, dict)
                                                    else row)]
        return [(f"parameter {i + 1}", p) for i, p in enumerate(params)]
    return []


@overload
def from_driver_error(exc: UnicodeEncodeError) -> UnstorableValueError: ...


@overload
def from_driver_error(exc: BaseException) -> UnstorableValueError | None: ...


def from_driver_error(exc: BaseException) -> UnstorableValueError | None:
    """The typed error for a driver's refusal of a text parameter (``UnicodeEncodeError``
    for a lone surrogate; PostgreSQL's "cannot contain NUL" ``DataError``), else None.

    A safety net behind the named checks: a path that did not check its arguments still
    raises one typed error (its transaction rolled back) rather than the driver's."""
    if isinstance(exc, UnstorableValueError):
        return exc
    if isinstance(exc, UnicodeEncodeError):
        value = exc.object
        return UnstorableValueError("a text parameter", value, _SURROGATE)
    text = str(getattr(exc, "orig", None) or exc)
    if "cannot contain NUL" not in text:
        return None
    for name, value in _params_of(exc):
        if isinstance(value, str) and "\x00" in value:
            return UnstorableValueError(name, value, _NUL)
    return UnstorableValueError("a text parameter", None, _NUL)
