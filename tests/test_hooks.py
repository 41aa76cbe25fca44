"""The hook specifications: each one implemented in a conftest.py, through pytester, and
the same hooks outside pytest through the standalone plugin manager."""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn

from pytest_fwdorder import trace_forward
from pytest_fwdorder.hookspecs import (
    FwdOrderPluginManager,
    hookimpl,
    plugin_manager,
    register_builtin_plugins,
)

TEST_WITH_BOX = """
import torch
from torch import nn


class Box:
    def __init__(self, tensor, size):
        self.tensor = tensor
        self.size = size


class Boxer(nn.Module):
    def forward(self, x):
        return Box(x * 2, (32, 32))


def test_box(forward_trace):
    trace = forward_trace(Boxer(), torch.zeros(3, 4))
    print(trace.render())
"""


def test_conftest_describes_a_custom_type(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        def pytest_fwdorder_describe_value(value, describe):
            if type(value).__name__ == "Box":
                return describe.fields("Box", {"tensor": value.tensor, "size": value.size})
            return None
        """
    )
    pytester.makepyfile(test_hooked_box=TEST_WITH_BOX)

    result = pytester.runpytest("-s")

    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["<root>: Boxer (f32[3,4]) -> Box(tensor=f32[3,4], size=(32, 32))"])


def test_an_error_in_a_describer_fails_the_test_and_names_the_hook(
    pytester: pytest.Pytester,
) -> None:
    # A bug in a plugin must not become golden text such as `<Box: not describable>`.
    pytester.makeconftest(
        """
        def pytest_fwdorder_describe_value(value, describe):
            if type(value).__name__ == "Box":
                return describe.fields("Box", {"missing": value.missing})
            return None
        """
    )
    pytester.makepyfile(test_hooked_box=TEST_WITH_BOX)

    result = pytester.runpytest()

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*AttributeError*missing*",
            "*pytest_fwdorder_describe_value hook raised while describing a Box*",
        ]
    )


def test_without_a_describer_a_custom_type_shows_its_name(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_hooked_box=TEST_WITH_BOX)

    result = pytester.runpytest("-s")

    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["<root>: Boxer (f32[3,4]) -> <Box>"])


def test_conftest_adds_module_facts(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import pytest

        @pytest.hookimpl
        def pytest_fwdorder_module_facts(module):
            scheme = getattr(module, "quantization_scheme", None)
            return {"quantization": scheme} if scheme is not None else None
        """
    )
    pytester.makepyfile(
        test_hooked_facts="""
        import torch
        from torch import nn

        def test_facts(forward_trace):
            model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
            model[0].quantization_scheme = "int8 per-channel"
            print(forward_trace(model, torch.zeros(1, 2)).render())
        """
    )

    result = pytester.runpytest("-s")

    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "  0: Linear (f32[1,2]) -> f32[1,2]",
            "    | settings: in_features=2, out_features=2, bias=True",
            "    | parameters: weight f32[2,2], bias f32[2]",
            "    | quantization: int8 per-channel",
            "  1: ReLU (f32[1,2]) -> f32[1,2]",
        ]
    )


def test_conftest_folds_calls_by_type(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        def pytest_fwdorder_call_view(path, module_type):
            return "fold" if module_type == "Block" else None
        """
    )
    pytester.makepyfile(
        test_hooked_view="""
        import torch
        from torch import nn

        class Block(nn.Sequential):
            pass

        def test_view(forward_trace):
            model = nn.Sequential(Block(nn.Linear(2, 2), nn.ReLU()), nn.Linear(2, 1))
            print(forward_trace(model, torch.zeros(1, 2), hide="settings parameters").render())
        """
    )

    result = pytester.runpytest("-s")

    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "# calls: 5",
            "# folded: 0",
            "<root>: Sequential (f32[1,2]) -> f32[1,1]",
            "  0: Block (f32[1,2]) -> f32[1,2] [+2 calls folded]",
            "  1: Linear (f32[1,2]) -> f32[1,1]",
        ]
    )


def test_conftest_hides_calls(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        def pytest_fwdorder_call_view(path, module_type):
            return "hide" if module_type == "Dropout" else None
        """
    )
    pytester.makepyfile(
        test_hooked_view="""
        import torch
        from torch import nn

        def test_view(forward_trace):
            model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(), nn.ReLU())
            print(forward_trace(model, torch.zeros(1, 2), hide="settings parameters").render())
        """
    )

    result = pytester.runpytest("-s")

    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["# calls: 4", "# calls hidden: 1", "  0: Linear*", "  2: ReLU*"])
    result.stdout.no_fnmatch_line("  1: Dropout*")


def test_a_view_hook_answering_nonsense_is_an_error(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        def pytest_fwdorder_call_view(path, module_type):
            return "folded"
        """
    )
    pytester.makepyfile(
        test_hooked_view="""
        import torch
        from torch import nn

        def test_view(forward_trace):
            forward_trace(nn.ReLU(), torch.zeros(1))
        """
    )

    result = pytester.runpytest()

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*pytest_fwdorder_call_view returned 'folded' for '<root>' (ReLU): return 'fold'*"]
    )


def test_the_plugin_declares_the_hooks_to_pytest(pytestconfig: pytest.Config) -> None:
    hook = pytestconfig.pluginmanager.hook

    assert hook.pytest_fwdorder_describe_value.spec.opts["firstresult"] is True
    assert hook.pytest_fwdorder_module_facts.spec.opts["firstresult"] is False
    assert hook.pytest_fwdorder_call_view.spec.opts["firstresult"] is True


class _Box:
    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


class _Boxer(nn.Module):
    def forward(self, x: torch.Tensor) -> _Box:
        return _Box(x)


class _BoxPlugin:
    @hookimpl
    def pytest_fwdorder_describe_value(self, value: object, describe: object) -> object:
        return describe.fields("Box", {"tensor": value.tensor}) if isinstance(value, _Box) else None  # type: ignore[attr-defined]


@pytest.fixture
def standalone_manager(monkeypatch: pytest.MonkeyPatch) -> FwdOrderPluginManager:
    """The manager library calls use outside pytest, fresh, with pytest's set aside."""
    from pytest_fwdorder import hookspecs as hooks

    manager = FwdOrderPluginManager()
    register_builtin_plugins(manager)
    monkeypatch.setattr(hooks, "_ACTIVE", [])
    monkeypatch.setattr(hooks, "_STANDALONE", [manager])
    return manager


def test_outside_pytest_a_registered_plugin_describes(
    standalone_manager: FwdOrderPluginManager,
) -> None:
    standalone_manager.register(_BoxPlugin())

    trace = trace_forward(_Boxer(), torch.zeros(2))

    assert trace.render().endswith("<root>: _Boxer (f32[2]) -> Box(tensor=f32[2])\n")


def test_outside_pytest_the_standalone_manager_is_used(
    standalone_manager: FwdOrderPluginManager,
) -> None:
    assert plugin_manager() is standalone_manager


def test_the_standalone_manager_takes_unmarked_implementations() -> None:
    class Plugin:
        def pytest_fwdorder_call_view(self, path: str, module_type: str) -> str | None:
            return None

    manager = FwdOrderPluginManager()
    manager.register(Plugin())

    assert len(manager.hook.pytest_fwdorder_call_view.get_hookimpls()) == 1


def test_a_module_facts_hook_returning_a_string_is_an_error(
    standalone_manager: FwdOrderPluginManager,
) -> None:
    class Plugin:
        def pytest_fwdorder_module_facts(self, module: nn.Module) -> str:
            return "int8"

    standalone_manager.register(Plugin())

    with pytest.raises(TypeError, match=r"returned 'str' for ReLU: return a dict of fact name"):
        trace_forward(nn.ReLU(), torch.zeros(1))


def test_the_docs_document_every_hook() -> None:
    from pathlib import Path

    from pytest_fwdorder.hookspecs import HookSpecifications

    readme = (Path(__file__).parent.parent / "docs" / "hooks.md").read_text(encoding="utf-8")
    names = [name for name in vars(HookSpecifications) if name.startswith("pytest_fwdorder_")]

    assert names
    assert [name for name in names if f"def {name}(" not in readme] == []


def test_each_built_in_plugin_registered_unimported_answers_the_facets_hook_alone() -> None:
    # Those modules are registered at start-up without being imported (hookspecs'
    # `_FacetsModule`), which answers that one hook: any other hook written in one of them
    # would never be called. The describers module answers another hook and is imported.
    from pytest_fwdorder.hookspecs import _FACETS_ONLY, BUILTIN_PLUGINS

    hooks_of = {
        module_name: {
            name for name in dir(importlib.import_module(module_name)) if name.startswith("pytest_")
        }
        for module_name in BUILTIN_PLUGINS
    }

    assert {name for name, hooks in hooks_of.items() if hooks == {"pytest_fwdorder_facets"}} == set(
        _FACETS_ONLY
    )
    assert hooks_of["pytest_fwdorder.recording.builtin_describers"] == {
        "pytest_fwdorder_describe_value"
    }


def test_a_built_in_facets_module_registered_unimported_gives_the_module_s_own_facets() -> None:
    from pytest_fwdorder.facets import values

    manager = FwdOrderPluginManager()
    register_builtin_plugins(manager)
    plugin = manager.get_plugin("pytest_fwdorder.facets.values")
    answers = manager.hook.pytest_fwdorder_facets()

    assert plugin is not values  # registered in the module's place, not the module
    assert [type(facet) for facet in values.pytest_fwdorder_facets()] in [
        [type(facet) for facet in answer] for answer in answers
    ]
