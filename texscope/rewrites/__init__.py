"""Stage 1's rewrites: constant folding in numpy, channel padding, bias rank,
decompositions of operators TVM cannot build, legalization keeping attributes."""
