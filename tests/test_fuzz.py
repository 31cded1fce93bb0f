"""Random modules through the whole pipeline: well formed, invariants kept,
numbers unchanged.  ``pytest -m fuzz --hypothesis-profile long`` runs thousands."""

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import texscope
from conftest import ADRENO, TINY
from fuzz_models import build, recipes
from texscope.verify import check_invariants, equivalent

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
