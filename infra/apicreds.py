"""What a query-API client sends: ``GPUATTR_API_TOKEN``, else the contents of
``GPUATTR_API_TOKEN_FILE`` (:class:`infra.settings.ApiSettings`)."""

from __future__ import annotations

from infra.settings import ApiSettings


def bearer_token(api: ApiSettings) -> str | None:
    """The token to send (None: none configured). The file is read at every call, since a
    projected ServiceAccount token is rotated under a running process; OSError when it cannot
    be read."""
    if api.token is not None:
        return api.token.get_secret_value()
    if api.token_file is None:
        return None
    return api.token_file.read_text().strip() or None


def auth_headers(api: ApiSettings) -> dict[str, str]:
    """The ``Authorization`` header for ``api``'s token (empty: no token configured)."""
    token = bearer_token(api)
    return {"Authorization": f"Bearer {token}"} if token else {}
