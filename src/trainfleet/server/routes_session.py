"""``/api/v1/session``: the dashboard's sign-in (a token in, a session cookie out), who is
signed in, and sign-out. See ``sessions`` for what the cookie holds and how it ends."""

from fastapi import APIRouter, Depends, Request, Response

from trainfleet.server.audit import source_of
from trainfleet.server.auth import TokenRefused, Tokens, Who
from trainfleet.server.errors import ERROR_RESPONSES, ApiError, responses
from trainfleet.server.params import known_query_only
from trainfleet.server.sessions import COOKIE, clear_cookie, set_cookie
from trainfleet.server.state import AccountsDep
from trainfleet.server.throttle import Throttle
from trainfleet.wire import SessionView, SignIn

router = APIRouter(
    prefix="/session",
    tags=["session"],
    dependencies=[Depends(known_query_only)],
    responses=ERROR_RESPONSES,
)


SIGN_INS_PER_MINUTE = 20
"""Sign-ins one address may try in a minute (429 beyond): tokens cannot be guessed, but
each try costs a lookup, and a flood of them should cost the flooder, not the store."""


def sign_in_throttle() -> Throttle:
    """One a server: addresses that try more than SIGN_INS_PER_MINUTE are refused."""
    return Throttle(per_source=SIGN_INS_PER_MINUTE, overall=2**62, seconds=60.0)


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


@router.post(
    "",
    responses=responses(
        _401="The token is unknown or revoked.",
        _429=f"Over {SIGN_INS_PER_MINUTE} sign-ins from this address this minute (Retry-After).",
    ),
)
async def sign_in(
    body: SignIn, request: Request, response: Response, accounts: AccountsDep
) -> SessionView:
    """Open a session with ``token``: an HttpOnly, SameSite=Strict cookie for the browser,
    and the CSRF token its changes must send."""
    throttle: Throttle = request.app.state.sign_ins
    if throttle.admit(source_of(request.scope)) is None:
        raise ApiError(
            429,
            f"over {SIGN_INS_PER_MINUTE} sign-ins from your address this minute: wait a minute",
            {"Retry-After": "60"},
        )
    tokens: Tokens = request.app.state.tokens
    try:
        who = tokens.sign_in(body.token)
    except TokenRefused as error:
        await request.app.state.auditor.refused(request.scope, error)
        raise
    assert tokens.sessions is not None
    session, cookie = tokens.sessions.new(who.token.digest)
    set_cookie(response, cookie, _secure(request))
    return SessionView(**accounts.whoami(who).model_dump(), csrf=session.csrf)


@router.get("")
def current(who: Who, request: Request, accounts: AccountsDep) -> SessionView:
    """Who is signed in (or holds the bearer token), with the session's CSRF token."""
    tokens: Tokens = request.app.state.tokens
    cookie = request.cookies.get(COOKIE)
    session = tokens.sessions.open(cookie) if cookie and tokens.sessions else None
    bearer = "authorization" in request.headers
    csrf = session.csrf if session is not None and not bearer else None
    return SessionView(**accounts.whoami(who).model_dump(), csrf=csrf)


@router.delete("", status_code=204)
def sign_out(_: Who, request: Request) -> Response:
    """End this browser's session (its cookie is cleared)."""
    response = Response(status_code=204)
    clear_cookie(response, _secure(request))
    return response
