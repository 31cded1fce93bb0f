"""Random modules through the whole pipeline: well formed, invariants kept,
numbers unchanged.  ``pytest -m fuzz --hypothesis-profile long`` runs thousands."""

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import texscope
from conftest import ADRENO, TINY
from fuzz_models import build, recipes
from texscope.verify import check_invariants, equivalent

settings.register_profile(
    "ci", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "long", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci")  # pytest's --hypothesis-profile overrides it


@pytest.mark.fuzz
@given(recipe=recipes(), tiny=st.booleans())
def test_random_modules_keep_invariants_and_numbers(recipe, tiny):
    target = TINY if tiny else ADRENO
    before = build(recipe)
    after = texscope.texture_scope_pipeline(target, check=True)(before)
    assert check_invariants(after, target) == []
    text = after.script()
    event(f"textures: {'yes' if 'texture' in text else 'no'}")
    event(f"copies: {text.count('R.to_vdevice(')}")
    comparison = equivalent(before, after)
    assert comparison.ok, comparison
