"""Triton kernels of the engine; imported only where CUDA (or TRITON_INTERPRET=1) makes them usable."""
