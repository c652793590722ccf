# tests/vm/test_memory_vm.py: the memory scenario (scenarios/memory.py) as the guest's user.
exec "$QEX_VM_PYTHON" "$QEX_VM_PROJECT/tests/vm/scenarios/memory.py" $MEMORY_ARGS
