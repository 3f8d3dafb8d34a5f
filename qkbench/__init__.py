"""qkbench: a null-arm microbenchmark harness for fused QK RMSNorm + RoPE."""

__version__ = "0.1.0"
