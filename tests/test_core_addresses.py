"""A store address printed anywhere (server start, errors, pipeline reports) never shows
its password, wherever the address carries it (tidings.core.addresses)."""

from __future__ import annotations

from urllib.parse import quote

from hypothesis import given
from hypothesis import strategies as st

from tidings.core.addresses import redact_address
from tidings.pipeline._url import redact
from tidings.store import redact_address as store_redact

secrets_ = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=4, max_size=24).filter(
    lambda s: s.strip() == s and not s.isdigit()
)


@given(secrets_, st.sampled_from(["postgresql", "postgres", "sqlite", "redis"]))
def test_the_password_never_shows_in_either_place(secret: str, scheme: str) -> None:
    marked = f"S3cr{secret}"  # never a substring of the rest of the address
    for url in (
        f"{scheme}://alice:{quote(marked, safe='')}@db.example:5432/tidings?search_path=t",
        f"{scheme}://alice@db.example/tidings?password={quote(marked, safe='')}&sslmode=require",
        f"{scheme}://alice@db.example/tidings?sslmode=verify-full&sslpassword={quote(marked, safe='')}",
    ):
        for shown in (redact_address(url), redact(url), store_redact(url)):
            assert marked not in shown and quote(marked, safe="") not in shown
            assert "alice" in shown and "db.example" in shown


def test_what_holds_no_password_is_left_as_it_is() -> None:
    for text in ("var", "/srv/tidings data/db?x", "postgresql://h/d", "postgresql://u@h:5432/d?sslmode=require",
                 "sqlite:///var/tidings.db"):
        assert redact_address(text) == text
    assert redact_address("postgresql://u:pw@h:5432/d") == "postgresql://u@h:5432/d"
    assert redact_address("postgresql://u:p%40ss@h/db?password=other&x=1") == "postgresql://u@h/db?password=***&x=1"
