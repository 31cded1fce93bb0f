"""Device memory of a build: the VM's allocations, texscope's storage plan,
the call order that lowers the peak, and a replay in planned storages."""
