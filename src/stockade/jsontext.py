"""JSON text for plain values without importing `json`.

`json` imports `re` and its decoder package: about 10 ms on the
per-command path, for values that are only strings, numbers, booleans,
None, lists and dicts. This uses the encoder's own C string escaper.
"""

from __future__ import annotations


def to_json(value: object) -> str:
    """JSON text for str, int, float, bool, None, and lists, tuples and dicts of them."""
    from _json import encode_basestring_ascii as quote

    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return str(quote(value))
    if isinstance(value, int | float):
        return repr(value) if value == value and value not in (float("inf"), float("-inf")) \
            else "null"
    if isinstance(value, list | tuple):
        return "[" + ",".join(to_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{quote(str(k))}:{to_json(v)}" for k, v in value.items()) + "}"
    return str(quote(str(value)))
