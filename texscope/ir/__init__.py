"""Reading and rebuilding Relax IR: bindings, users, function rebuilding,
and keeping TVM quiet."""
