"""Which attention core a training run uses: `model.attention_impl` ('auto', 'xla',
'dot_product'; config/training.py, ModelSpec) resolved once, at the start of the run, for the
backend it runs on. Pure: the backend is a `jax.default_backend()` name passed in."""
from __future__ import annotations

from anisotropy_jax.config.training import ModelSpec

# Head widths cuDNN's fused attention takes on every GPU: multiples of 8 up to 128 (Hopper and
# later take up to 256).
CUDNN_MAX_HEAD_WIDTH = 128


def _why_xla_core(spec: ModelSpec, backend: str) -> str | None:
    """Why 'auto' keeps the XLA core for `spec` on `backend` (a `jax.default_backend()` name), or
    None where cuDNN's fused attention runs it: a GPU, bfloat16 matmuls (cuDNN's kernel takes
    bf16/fp16 only; at 'highest' the 'dot_product' core would compute the logits at TF32, and at
    'default' it is XLA's own einsums, the same work as the 'xla' core), softmax attention
    without the output gate, and a head width cuDNN takes."""
    d_head = spec.d_model // spec.num_heads
    if backend != "gpu":
        return f"cuDNN's fused attention runs on GPUs only, not on {backend}"
    if spec.attention_normalization != "softmax" or spec.attention_output_gate:
        return (f"the fused core is softmax without the output gate; attention_normalization="
                f"{spec.attention_normalization!r}, attention_output_gate="
                f"{spec.attention_output_gate}")
    if spec.precision != "bfloat16":
        return f"cuDNN's fused attention takes bfloat16 only; precision={spec.precision!r}"
    if d_head % 8 or d_head > CUDNN_MAX_HEAD_WIDTH:
        return (f"cuDNN takes head widths that are multiples of 8 up to {CUDNN_MAX_HEAD_WIDTH}; "
                f"this one is {d_head}")
    return None


def resolve_attention_impl(spec: ModelSpec, backend: str) -> str:
    """The BlockConfig core a run of `spec` trains with on `backend`: spec.attention_impl when
    set, and for 'auto' the fastest core that computes this model there: 'dot_product' (cuDNN's
    fused attention) where `_why_xla_core` finds no reason against it, else 'xla'."""
    if spec.attention_impl != "auto":
        return spec.attention_impl
    return "xla" if _why_xla_core(spec, backend) else "dot_product"


def attention_core_note(spec: ModelSpec, backend: str) -> str:
    """The line a run prints at its start, e.g. "attention core: dot_product (auto: cuDNN fused
    attention on gpu)"."""
    impl = resolve_attention_impl(spec, backend)
    if spec.attention_impl != "auto":
        return f"attention core: {impl} (model.attention_impl)"
    why = _why_xla_core(spec, backend)
    return f"attention core: {impl} (auto: {why or f'cuDNN fused attention on {backend}'})"
