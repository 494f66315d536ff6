"""Which SpecForge chat template the export states, refuses or warns about."""

from __future__ import annotations

import pytest

from specpilot.errors import UserError
from specpilot.export.templates import TEMPLATE_RULES, choose_template


@pytest.mark.parametrize("model", ["Qwen/Qwen3.6-27B", "qwen3.5-35b-a3b", "/models/Qwen3_6-MTP"])
def test_qwen35_and_36_models_get_the_qwen35_template(model: str) -> None:
    assert choose_template(None, model) == ("qwen3.5", [])


@pytest.mark.parametrize("name", [n for n, rule in TEMPLATE_RULES.items() if rule.refused_because])
def test_templates_that_change_the_text_are_refused_with_the_fix(name: str) -> None:
    with pytest.raises(UserError) as err:
        choose_template(name, "Qwen/Qwen3.6-27B")
    assert err.value.field == "--chat-template" and "--chat-template qwen3.5" in str(err.value)


def test_unknown_model_or_template_is_a_warning_not_a_guess() -> None:
    name, warnings = choose_template(None, "meta-llama/Llama-3.1-8B")
    assert name is None and "no known SpecForge template" in warnings[0]
    name, warnings = choose_template("llama3", "meta-llama/Llama-3.1-8B")
    assert name == "llama3" and "does not know" in warnings[0]


def test_a_template_specforge_does_not_have_is_refused_with_the_fix() -> None:
    with pytest.raises(
        UserError, match=r"--chat-template: SpecForge has no chat template 'qwen35'.*qwen3\.5"
    ):
        choose_template("qwen35", "Qwen/Qwen3.6-27B")
