"""What operators and devices support, and what they cost: the operator
registry, the target presets, cost profiles and memory-scope names."""
