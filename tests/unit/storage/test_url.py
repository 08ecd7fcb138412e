"""Showing a storage URL (`storage.url.redacted`), refusing an empty one (`check_url`), and giving
one to a child process without its password on the command line (`for_child`)."""

from __future__ import annotations

import pytest

from storage.database import StorageError, check_url
from storage.url import PasswordInArgv, for_child, redacted


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
        (
            "postgresql://tuner@db/x?password=s3cret&sslmode=require",
            "postgresql://tuner@db/x?password=***&sslmode=require",
        ),
        (  # `make db`'s: shown as printed
            "postgresql+psycopg://autotune@127.0.0.1:5433/autotune?passfile=/srv/my runs/postgres/pgpass",
            "postgresql+psycopg://autotune@127.0.0.1:5433/autotune?passfile=/srv/my runs/postgres/pgpass",
        ),
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


@pytest.mark.parametrize(
    "url, bare, password",
    [
        (
            "postgresql+psycopg://autotune:s3cret@127.0.0.1:5432/autotune",
            "postgresql+psycopg://autotune@127.0.0.1:5432/autotune",
            "s3cret",
        ),
        ("postgresql://tuner:p%40ss@db/x?sslmode=require", "postgresql://tuner@db/x?sslmode=require", "p@ss"),
        ("postgresql+psycopg2://tuner@db/x?password=s3cret", "postgresql+psycopg2://tuner@db/x", "s3cret"),
    ],
)
def test_a_child_gets_the_url_without_its_password_and_the_password_in_its_environment(url, bare, password):
    assert for_child(url) == (bare, {"PGPASSWORD": password})


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://autotune@127.0.0.1:5433/autotune?passfile=/srv/runs/postgres/pgpass",
        "sqlite:///runs/autotune.db",
        "postgresql://tuner:s3cret@db:notaport/x",  # refused by check_url before any child starts
    ],
)
def test_a_url_without_a_password_goes_to_a_child_as_it_is(url):
    assert for_child(url) == (url, {})


def test_a_password_only_a_command_line_could_carry_is_refused():
    with pytest.raises(PasswordInArgv) as raised:
        for_child("mysql+pymysql://tuner:s3cret@db/x")
    assert str(raised.value) == (
        "--storage mysql+pymysql://tuner:***@db/x: its password would be on the workers' command lines, "
        "where `ps` shows it; PostgreSQL (postgresql+psycopg://) takes it from their environment instead"
    )
