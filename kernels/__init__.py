"""qkbench's Triton kernels: QK RMSNorm + RoPE as one fused launch or as three.

Usable on their own; nothing here imports the harness.
"""

from . import launch, plan, reference
from .dispatch import qk_norm_rope_auto  # its tables: dispatch.DispatchTable
from .fused import qk_norm_rope
from .plan import TilePlan
from .rms_norm import rms_norm
from .rope import rope
from .split import qk_norm_rope_split

__all__ = ["TilePlan", "launch", "plan", "qk_norm_rope", "qk_norm_rope_auto",
           "qk_norm_rope_split", "reference", "rms_norm", "rope"]
