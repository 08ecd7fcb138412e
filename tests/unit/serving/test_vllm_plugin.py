"""The tuner's vLLM plugin: on only in the servers the tuner starts with it, nameable by nothing a
scenario says, inert everywhere else (no entry point, and nothing without its variable); where it
is on, it skips the MoE router GEMM warm-up for a dense model on a vLLM that does not skip it
itself, and inductor's lazy-init pre-trigger where no GPU sync check needs it."""

import sys
import tomllib
from types import ModuleType, SimpleNamespace

import pytest

from serving import scenario_flag_problem
from serving.process.entry import autotune_vllm_plugin as plugin
from serving.process.entry.autotune_vllm_plugin import hooks, warmups
from serving.process.launch_spec import PLUGIN_ENV, LaunchSpec
from serving.process.server import VllmServer
from tests.support.paths import REPO


@pytest.fixture
def fresh(monkeypatch):
    """The plugin as a new server process has it: nothing active, nothing said, no import hook."""
    monkeypatch.setattr(plugin, "_active", [])
    monkeypatch.setattr(plugin, "_said", set())
    monkeypatch.setattr(hooks, "_waiting", {})
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if f is not hooks._FINDER])
    said: list[str] = []
    monkeypatch.setattr(plugin, "say", said.append)
    return said


def test_the_plugin_has_no_entry_point_so_no_other_vllm_loads_it():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "vllm.general_plugins" not in project.get("entry-points", {})


def test_without_the_tuners_variable_the_plugin_does_nothing(fresh):
    assert plugin.activate({}) == [] and plugin.activate({PLUGIN_ENV: "0"}) == []
    assert hooks._FINDER not in sys.meta_path and hooks._waiting == {}


def test_the_tuner_turns_it_on_in_its_own_servers_only(tmp_path, monkeypatch):
    monkeypatch.setenv(PLUGIN_ENV, "1")  # the user's environment does not turn it on
    ours = VllmServer(LaunchSpec(model=None, args=[], log_path=tmp_path / "s.log"))
    vanilla = VllmServer(LaunchSpec(model=None, args=[], log_path=tmp_path / "s.log", plugin=False))
    assert ours._env()[PLUGIN_ENV] == "1" and PLUGIN_ENV not in vanilla._env()
    assert "autotune_vllm_entry" in ours.spec.command(port=1)[2]


@pytest.mark.parametrize("name", ["VLLM_PLUGINS", "autotune_vllm_plugin", "plugins", "worker_extension_cls"])
def test_a_scenario_naming_a_plugin_is_refused_in_one_line(name):
    problem = scenario_flag_problem([name])
    assert problem is not None and "\n" not in problem and "is neither a tunable parameter" in problem


def kernel_warmup_module(router_warmup) -> ModuleType:
    module = ModuleType(warmups.KERNEL_WARMUP)
    module._warmup_ll_bf16_router_gemm = router_warmup
    return module


class Layer:
    def __init__(self, *children):
        self.children = children

    def modules(self):
        yield self
        for c in self.children:
            yield from c.modules()


class FusedMoE(Layer):
    pass


def kernel_warmup(module, worker) -> None:  # as vLLM 0.26's kernel_warmup(worker) calls it
    module._warmup_ll_bf16_router_gemm()


@pytest.mark.parametrize("model, kept", [(Layer(Layer(), Layer()), False), (Layer(Layer(FusedMoE())), True)])
def test_the_router_warm_up_runs_only_for_a_model_with_moe_layers(fresh, monkeypatch, model, kept):
    ran = []
    module = kernel_warmup_module(lambda: ran.append(True))
    monkeypatch.setitem(sys.modules, warmups.KERNEL_WARMUP, module)
    plugin.activate({PLUGIN_ENV: "1"})
    kernel_warmup(module, SimpleNamespace(get_model=lambda: model))
    assert ran == ([True] if kept else [])
    assert any(("kept" if kept else "skipped: Layer has no MoE layer") in line for line in fresh)


def test_a_vllm_that_takes_the_model_keeps_its_own_router_warm_up(fresh, monkeypatch):
    def own(model):
        return None

    module = kernel_warmup_module(own)
    monkeypatch.setitem(sys.modules, warmups.KERNEL_WARMUP, module)
    plugin.activate({PLUGIN_ENV: "1"})
    assert module._warmup_ll_bf16_router_gemm is own and "left alone" in fresh[0]


def test_the_lazy_init_pre_trigger_runs_only_under_the_gpu_sync_check(fresh, monkeypatch):
    calls = []
    module = ModuleType(warmups.COMPILER_INTERFACE)
    module.trigger_inductor_lazy_init = lambda device=None: calls.append(device)
    monkeypatch.setitem(sys.modules, warmups.COMPILER_INTERFACE, module)
    plugin.activate({PLUGIN_ENV: "1"})
    monkeypatch.delenv("VLLM_GPU_SYNC_CHECK", raising=False)
    module.trigger_inductor_lazy_init("cuda:0")
    monkeypatch.setenv("VLLM_GPU_SYNC_CHECK", "warn")
    module.trigger_inductor_lazy_init("cuda:0")
    assert calls == ["cuda:0"]
    assert "skipped" in fresh[0] and "took" in fresh[1]


def test_a_patch_waits_for_its_module_to_be_imported(fresh, tmp_path, monkeypatch):
    (tmp_path / "later_module.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    hooks.when_imported("later_module", lambda m: seen.append(m.x))
    assert seen == []
    import later_module

    assert seen == [1]
    assert "x = 1" in later_module.__loader__.get_source("later_module")  # inspect and linecache still work
    monkeypatch.delitem(sys.modules, "later_module")
