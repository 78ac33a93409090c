"""The task catalog: reference operators, input generators, shapes and seed kernels."""
