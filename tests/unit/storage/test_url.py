"""Showing a storage URL (`storage.url.redacted`) and refusing an empty one (`check_url`)."""

from __future__ import annotations

import pytest

from storage.queries import StorageError, check_url
from storage.url import redacted


@pytest.mark.parametrize(
    "url, shown",
    [
        (
            "postgresql+psycopg://autotune:s3cret@127.0.0.1:5432/autotune",
            "postgresql+psycopg://autotune:***@127.0.0.1:5432/autotune",
        ),
        ("postgresql://tuner:p%40ss@db/x", "postgresql://tuner:***@db/x"),
        (
            "postgresql://tuner:s3cret@db:notaport/x",
            "postgresql://tuner:***@db:notaport/x",
        ),  # SQLAlchemy cannot parse it
        ("postgresql://tuner@db:5432/x", "postgresql://tuner@db:5432/x"),
        ("sqlite:///runs/autotune.db", "sqlite:///runs/autotune.db"),
        ("runs/autotune.db", "runs/autotune.db"),
    ],
)
def test_a_url_is_shown_without_its_password(url, shown):
    assert redacted(url) == shown


@pytest.mark.parametrize("url", ["", "  "])
def test_an_empty_url_is_refused_not_taken_for_the_default(url):
    with pytest.raises(StorageError) as raised:
        check_url(url)
    assert str(raised.value) == (
        "--storage is empty (an unset variable?); pass a database URL: the one `make db` "
        "prints, or sqlite:///PATH/autotune.db"
    )


def test_a_url_with_a_port_that_is_no_number_is_one_error_without_its_password():
    with pytest.raises(StorageError) as raised:
        check_url("postgresql+psycopg://tuner:s3cret@db:notaport/x")
    assert str(raised.value) == (
        "--storage 'postgresql+psycopg://tuner:***@db:notaport/x' is not a database URL; "
        "use sqlite:///PATH/autotune.db or DIALECT+DRIVER://USER:PASSWORD@HOST/DATABASE"
    )
