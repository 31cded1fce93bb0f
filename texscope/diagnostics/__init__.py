"""What users and tests look at: explain, reports, checks, numeric comparison,
pass timing, the exhaustive yardstick of the planner."""
