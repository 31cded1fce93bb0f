"""From scheduled TIR to device kernels: one PrimFunc per storage signature,
the Adreno TIR pipeline, kernel names of bounded length."""
