"""The integer maths once: the reference of every int8 kernel (reference.py) and the C kernels through ctypes."""
