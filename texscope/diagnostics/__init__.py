"""What users and tests look at: explain, reports, checks, numeric comparison,
pass timing, the exhaustive yardstick of the planner."""

from .. import _submodules_on_access

__getattr__ = _submodules_on_access(__name__)
