"""Kernels under test: our GDPA Triton kernels, baselines, and the exact reference, behind one registry."""

from kernels.registry import CaseSpec, Provider, get_provider, provider_names, register

__all__ = ["CaseSpec", "Provider", "get_provider", "provider_names", "register"]
