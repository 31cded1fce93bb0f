"""Lowering an annotated module to texture kernels and writing the build."""
