"""Kernels measured on the device: the tuning set of a model (every kernel in
every storage), the measured costs the planner reads back, and the fixed
kernel set ``texscope calibrate --kernels`` times."""
