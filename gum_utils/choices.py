"""One check for every named choice and every condition, so every bad value fails with the same clear message."""

import difflib


def check_choice(kind: str, value, valid) -> None:
    """Raise ValueError naming the valid choices (and the closest one) unless value is one of them."""
    if value in valid:
        return
    hint = difflib.get_close_matches(str(value), [str(v) for v in valid], n=1)
    maybe = f" (did you mean {hint[0]!r}?)" if hint else ""
    raise ValueError(f"unknown {kind} {value!r}{maybe}; valid choices: {', '.join(map(str, valid))}")


def require(condition: bool, message: str) -> None:
    """Raise ValueError(message) unless the condition holds."""
    if not condition:
        raise ValueError(message)
