"""The web port's bearer token: where it is read from, what makes one usable, and the comparison.

Read from a file (``--http-token-file``: a mounted Kubernetes Secret; one
trailing newline dropped) or from ``RECURRENCE_HTTP_TOKEN``. An empty, short
(under MIN_TOKEN_LENGTH) or header-unsafe token is refused at start (exit 2):
an empty variable must not leave the port open by accident. The comparison
is of the two tokens' SHA-256 digests with ``hmac.compare_digest``, so its
time depends on neither token's content nor length. No web framework here:
the settings of every command import this module.
"""

import hashlib
import hmac
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from ..exceptions import SettingsError
from ..host.printable import shown
from ..host.regularfile import read_small

TOKEN_ENV: Final = "RECURRENCE_HTTP_TOKEN"
#: A shorter token is refused: guessable. ``openssl rand -hex 32`` makes a good one.
MIN_TOKEN_LENGTH: Final = 16
#: A token file is small; anything larger is not one.
TOKEN_FILE_LIMIT: Final = 4096


def check_token(token: str, where: str) -> str:
    """A usable token: visible ASCII without spaces (it travels in a header), at least MIN_TOKEN_LENGTH long."""
    if not token:
        raise SettingsError(f"{where} is empty; set a token of at least {MIN_TOKEN_LENGTH} characters, or unset it")
    if not (token.isascii() and token.isprintable() and " " not in token):
        raise SettingsError(
            f"{where} holds spaces, control or non-ASCII characters; a token travels in an HTTP "
            "header: use letters, digits and punctuation (openssl rand -hex 32)"
        )
    if len(token) < MIN_TOKEN_LENGTH:
        raise SettingsError(
            f"{where} is {len(token)} characters long; use at least {MIN_TOKEN_LENGTH} (openssl rand -hex 32)"
        )
    return token


def read_token_file(token_file: Path) -> str:
    """The token in a file: its content, one trailing newline dropped."""
    raw = read_small(token_file, "--http-token-file", limit=TOKEN_FILE_LIMIT)
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise SettingsError(f"--http-token-file {shown(token_file)} is not ASCII text") from None
    return check_token(text.removesuffix("\n").removesuffix("\r"), f"--http-token-file {shown(token_file)}")


def load_token(token_file: Path | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The configured token: the file's, else RECURRENCE_HTTP_TOKEN's (set but empty is refused), else None."""
    if token_file is not None:
        return read_token_file(token_file)
    value = environ.get(TOKEN_ENV)
    return None if value is None else check_token(value, TOKEN_ENV)


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()


class Access:
    """Who may read: anyone (no token configured), or a request that carries the token."""

    def __init__(self, token: str | None = None) -> None:
        self._token = token
        self._digest = None if token is None else _digest(token)

    @property
    def required(self) -> bool:
        return self._digest is not None

    def allows(self, authorization: str | None) -> bool:
        if self._digest is None:
            return True
        scheme, _, credentials = (authorization or "").strip().partition(" ")
        # Both digests are compared whatever the scheme, so a refusal takes as long as an acceptance.
        matches = hmac.compare_digest(_digest(credentials.strip()), self._digest)
        return matches and scheme.lower() == "bearer"

    def headers(self) -> dict[str, str]:
        """What a request to another worker carries (they share the token)."""
        return {} if self._token is None else {"Authorization": f"Bearer {self._token}"}
