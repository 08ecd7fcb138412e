"""What a server inherits from the tuner's environment, and why a zygote was replaced: names only,
never values (serving.process.server, serving.process.zygote).
"""

from serving.process import server as server_mod
from serving.process import zygote
from serving.process.server import LaunchSpec, VllmServer


def test_variables_the_tuners_libraries_set_for_themselves_do_not_reach_the_server(monkeypatch, tmp_path):
    """scikit-learn sets KMP_* when Optuna's importances import it, after a study's first trial;
    passed on, they changed the servers' environment mid-study (a second zygote, 10 s more)."""
    server = VllmServer(LaunchSpec(model=None, args=[], log_path=tmp_path / "s.log"))
    monkeypatch.setattr(server_mod, "_NOT_THE_USERS", server_mod.TUNER_LIBRARY_ENV)
    monkeypatch.setenv("KMP_DUPLICATE_LIB_OK", "True")
    assert "KMP_DUPLICATE_LIB_OK" not in server._env()
    monkeypatch.setattr(server_mod, "_NOT_THE_USERS", frozenset({"KMP_INIT_AT_FORK"}))  # the user set the other
    assert server._env()["KMP_DUPLICATE_LIB_OK"] == "True"


def test_a_replaced_zygote_is_explained_by_names_never_values(tmp_path):
    old = zygote.Zygote.__new__(zygote.Zygote)
    old.key, old.gone = zygote.zygote_key("py", {"A": "1", "TOKEN": "secret-1"}), False
    why = zygote._replaced_because(old, zygote.zygote_key("py", {"A": "1", "TOKEN": "secret-2", "B": "x"}))
    assert why == "the environment differs from the last one's in B, TOKEN" and "secret" not in why
