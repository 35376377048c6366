"""Which attention core a training run uses: `model.attention_impl` ('auto', 'xla',
'dot_product', 'flash'; config/training.py, ModelSpec) resolved once, at the start of the run, for
the backend it runs on. Pure: the backend is a `jax.default_backend()` name passed in."""
from __future__ import annotations

from anisotropy_jax.config.model import FLASH_MAX_HEAD_WIDTH, FLASH_NORMALIZATIONS
from anisotropy_jax.config.training import ModelSpec

# Head widths cuDNN's fused attention takes on every GPU: multiples of 8 up to 128 (Hopper and
# later take up to 256).
CUDNN_MAX_HEAD_WIDTH = 128
# The precisions at which 'auto' trains softmax attention that cuDNN does not run (float32
# inputs) with the Pallas flash core instead of XLA's: 'default' (TF32), where the attention's
# forward + backward at `train:gpu`'s shapes took 0.38 ms with flash against 0.68 ms with XLA on
# one H200 (the whole step: order-confounded between two calls; docs/benchmarks/flash_core_h200/).
# 'highest' (IEEE float32 matmuls, no tensor cores in
# Triton) is untimed and stays on XLA. The other normalisations take the flash core on GPUs
# regardless: XLA is their only other core.
FLASH_FOR_FLOAT32_SOFTMAX = ("default",)


def _why_not_cudnn(spec: ModelSpec, backend: str) -> str | None:
    """Why cuDNN's fused attention does not run `spec` on `backend` (a `jax.default_backend()`
    name), or None where it does: a GPU, bfloat16 matmuls (cuDNN's kernel takes bf16/fp16 only;
    at 'highest' the 'dot_product' core would compute the logits at TF32, and at 'default' it is
    XLA's own einsums, the same work as the 'xla' core), softmax attention without the output
    gate, and a head width cuDNN takes."""
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


def _why_not_flash(spec: ModelSpec) -> str | None:
    """Why 'auto' does not take the Pallas flash core for `spec` on a GPU where cuDNN does not
    run it, or None: a normalisation and head width the kernels compute, and for softmax at
    float32 a precision of FLASH_FOR_FLOAT32_SOFTMAX (where the kernel was timed faster). (Off GPU
    the kernels run only in slow interpret mode: never 'auto''s choice there.)"""
    if spec.attention_normalization not in FLASH_NORMALIZATIONS:
        return (f"no fused core computes attention_normalization="
                f"{spec.attention_normalization!r}")
    if spec.d_model // spec.num_heads > FLASH_MAX_HEAD_WIDTH:
        return f"the flash kernels take heads up to {FLASH_MAX_HEAD_WIDTH} wide"
    if (spec.attention_normalization == "softmax" and spec.precision != "bfloat16"
            and spec.precision not in FLASH_FOR_FLOAT32_SOFTMAX):
        return f"XLA's core for softmax at precision={spec.precision!r}: flash is untimed there"
    return None


def _auto(spec: ModelSpec, backend: str) -> tuple[str, str]:
    """('auto''s core for `spec` on `backend`, why)."""
    no_cudnn = _why_not_cudnn(spec, backend)
    if no_cudnn is None:
        return "dot_product", f"cuDNN fused attention on {backend}"
    if backend != "gpu":
        return "xla", no_cudnn
    no_flash = _why_not_flash(spec)
    if no_flash is None:
        return "flash", f"Pallas flash attention on {backend}; not cuDNN's: {no_cudnn}"
    return "xla", f"{no_cudnn}; {no_flash}"


def resolve_attention_impl(spec: ModelSpec, backend: str) -> str:
    """The BlockConfig core a run of `spec` trains with on `backend`: spec.attention_impl when
    set, and for 'auto' the fastest core that computes this model there: 'dot_product' (cuDNN's
    fused attention) where it runs, else on a GPU 'flash' (the Pallas flash kernels) where
    `_why_not_flash` finds no reason against it, else 'xla'. Never a GPU-only core off GPU."""
    if spec.attention_impl != "auto":
        return spec.attention_impl
    return _auto(spec, backend)[0]


def attention_core_note(spec: ModelSpec, backend: str) -> str:
    """The line a run prints at its start, e.g. "attention core: dot_product (auto: cuDNN fused
    attention on gpu)" or "attention core: flash (auto: Pallas flash attention on gpu: ...)"."""
    if spec.attention_impl != "auto":
        return f"attention core: {spec.attention_impl} (model.attention_impl)"
    impl, why = _auto(spec, backend)
    return f"attention core: {impl} (auto: {why})"
