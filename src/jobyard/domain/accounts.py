"""What an account's email and a new password must be: one rule for the API and the CLI."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

Email = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True,
        to_lower=True,
        min_length=3,
        max_length=320,
        pattern=r"^[^@\s\x00-\x1f\x7f]+@[^@\s\x00-\x1f\x7f]+$",
    ),
]
Password = Annotated[str, Field(min_length=1, max_length=1024)]
NewPassword = Annotated[str, Field(min_length=12, max_length=1024)]
