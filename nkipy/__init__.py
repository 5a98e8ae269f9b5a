"""nkipy: NumPy-style kernels traced to an IR and compiled to native NEFFs."""
