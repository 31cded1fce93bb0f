"""Kernel schedules: which rule schedules each fused kernel, the rules
(conv, reduction, layout transform, fallback), their thread blocks and guards."""
