"""Random modules through the whole pipeline: well formed, invariants kept,
numbers unchanged.  ``pytest -m fuzz --hypothesis-profile long`` runs thousands."""

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

import texscope
from conftest import ADRENO, TINY
from fuzz_models import build, recipes
from texscope.verify import check_invariants, equivalent

@pytest.mark.fuzz
@given(recipe=recipes(), tiny=st.booleans())
# Found by the long profile: a copy into a texture flavour no tensor is written
# in had no VDevice in global_infos.
@example(recipe=(4, 80, 4, (("conv", 0, 0, False), ("mean", 1, 0, False), ("conv", 0, 0, False),
                            ("conv", 2, 0, False), ("conv", 0, 0, False), ("conv", 0, 0, False))),
         tiny=True)
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
