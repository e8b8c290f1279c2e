"""``/api/v1/session``: the dashboard's sign-in (a token in, a session cookie out), who is
signed in, and sign-out. See ``sessions`` for what the cookie holds and how it ends."""

from fastapi import APIRouter, Depends, Request, Response

from trainfleet.server.auth import TokenRefused, Tokens, Who
from trainfleet.server.errors import ERROR_RESPONSES, responses
from trainfleet.server.params import known_query_only
from trainfleet.server.sessions import COOKIE, clear_cookie, set_cookie
from trainfleet.server.state import AccountsDep
from trainfleet.wire import SessionView, SignIn

router = APIRouter(
    prefix="/session",
    tags=["session"],
    dependencies=[Depends(known_query_only)],
    responses=ERROR_RESPONSES,
)


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


@router.post("", responses=responses(_401="The token is unknown or revoked."))
async def sign_in(
    body: SignIn, request: Request, response: Response, accounts: AccountsDep
) -> SessionView:
    """Open a session with ``token``: an HttpOnly, SameSite=Strict cookie for the browser,
    and the CSRF token its changes must send."""
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
