"""``tidings.fastpath``: a hot route served without Starlette's walk answers as the walk
would, a failure included, and every other request still takes the walk."""

from __future__ import annotations

import logging

import aiohttp
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tidings.fastpath import FastPathApp

from .front_support import serving


async def test_a_hot_route_is_served_directly_and_the_rest_as_before(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[tuple[str, dict[str, str]]] = []

    async def hot(request: Request) -> Response:
        seen.append(("hot", dict(request.path_params)))
        body = await request.body()
        if body == b"boom":
            raise RuntimeError("an endpoint's own bug")
        return JSONResponse({"hot": body.decode()})

    async def walked(request: Request) -> Response:
        seen.append(("walked", dict(request.path_params)))
        return JSONResponse({"walked": request.method})

    app = FastPathApp(
        fast={"/v1/hot": (hot, {"method": "hot"})},
        internal_error=lambda: JSONResponse({"error": "internal"}, status_code=500),
        routes=[Route("/v1/{method}", walked, methods=["GET", "POST"])],
    )
    async with serving(app, lifespan="off") as url, aiohttp.ClientSession() as http:
        async with http.post(f"{url}/v1/hot", data=b"x") as r:
            assert (r.status, await r.json()) == (200, {"hot": "x"})
        with caplog.at_level(logging.ERROR, logger="tidings.api"):
            async with http.post(f"{url}/v1/hot", data=b"boom") as r:
                assert (r.status, await r.json()) == (500, {"error": "internal"})
        assert "an endpoint's own bug" in caplog.text
        async with http.get(f"{url}/v1/hot") as r:  # another verb: the walk
            assert await r.json() == {"walked": "GET"}
        async with http.post(f"{url}/v1/other") as r:  # another path: the walk
            assert await r.json() == {"walked": "POST"}
        # Not the exact path: the walk (which redirects to the path without the slash).
        async with http.post(f"{url}/v1/hot/", allow_redirects=False) as r:
            assert (r.status, r.headers["location"]) == (307, f"{url}/v1/hot")
    assert seen == [("hot", {"method": "hot"}), ("hot", {"method": "hot"}), ("walked", {"method": "hot"}),
                    ("walked", {"method": "other"})]
