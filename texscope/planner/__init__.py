"""The solver: plan costs and the exact min-cut."""
