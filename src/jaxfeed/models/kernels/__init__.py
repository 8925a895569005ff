"""Pallas kernels jaxfeed carries itself: :mod:`~jaxfeed.models.kernels.splash_dropout`, splash
attention (forked from JAX) with dropout on the attention weights inside the fused kernel."""
