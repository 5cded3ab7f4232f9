"""The integer maths once: the reference of every int8 kernel (reference.py; the linear core, linear.py) and the C
kernels through ctypes."""
