"""Godey 3 inside trained networks (anisotropy_jax/studies/extreme/intervention.py and its verdict,
anisotropy_jax/studies/report/verdicts_intervention.py): every intervention and every metric
against a slow float64 numpy reference; the block run alone against the whole model patched; and
the rule's controls: on isotropic states the treatment and the random-direction control are
indistinguishable and the rule does not say "holds"; with a planted common direction that the
attention reads, it says "holds"."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from anisotropy_jax.config import BlockConfig
from anisotropy_jax.models import patching, registry
from anisotropy_jax.models.attention import MASK_VALUE
from anisotropy_jax.models.block import Block
from anisotropy_jax.studies.extreme import intervention as iv
from anisotropy_jax.studies.report import verdicts_intervention as verdict


def _reference_patch(h, mask, arm, u):
    """The intervention of one arm, token by token, in float64."""
    h = np.asarray(h, np.float64)
    keep = np.array(mask, bool)
    if arm["without_first"]:
        keep[:, 0] = False
    mu = np.mean([h[b, i] for b in range(h.shape[0]) for i in range(h.shape[1]) if keep[b, i]],
                 axis=0)
    out = h.copy()
    for b in range(h.shape[0]):
        mu_b = np.mean([h[b, i] for i in range(h.shape[1]) if keep[b, i]], axis=0)
        for i in range(h.shape[1]):
            if not mask[b, i]:
                continue
            new = h[b, i] + arm["a"] * mu + arm["b"] * mu_b
            if arm["direction"] >= 0:
                new = new - np.linalg.norm(mu) * u[arm["direction"]]
            if arm["fixed_norm"]:
                new = new * np.linalg.norm(h[b, i]) / np.linalg.norm(new)
            out[b, i] = new
    return out


def test_every_intervention_matches_the_float64_reference():
    rng = np.random.default_rng(0)
    h = rng.standard_normal((4, 7, 6)) + np.array([3.0, 0, 0, 0, 0, 1.0])
    h[:, 0] *= 20  # a massive first token: the two centres differ
    mask = np.ones((4, 7), bool)
    mask[1, 5:] = mask[3, 4:] = False
    table = iv.arms(3)
    u = iv.random_directions(0, 0, 3, 6)
    ops = iv.operands(table, u)
    assert len(table) == 1 + 2 * 2 * (len(iv.OPS) + 3)
    every = jax.jit(jax.vmap(lambda op: iv.common_component_patch(op, jnp.asarray(mask))(
        jnp.asarray(h, jnp.float32), patching.Address(0, "resid_pre"))))(ops)
    for i, arm in enumerate(table):
        np.testing.assert_allclose(every[i], _reference_patch(h, mask, arm, u), rtol=2e-5,
                                   atol=2e-4, err_msg=arm["name"])
    same = {k: v[0] for k, v in ops.items()}  # the baseline is the identity
    np.testing.assert_array_equal(iv.common_component_patch(same, jnp.asarray(mask))(
        jnp.asarray(h, jnp.float32), None), np.asarray(h, np.float32))


def _reference_metrics(logits, mask):
    """H/ln n, the largest weight and the row cosine per sequence, query by query."""
    B, H, L, _ = logits.shape
    out = {m: np.zeros(B) for m in iv.METRICS}
    for b in range(B):
        ent, mx, cos = [], [], []
        for h in range(H):
            rows = []
            for i in range(L):
                vis = logits[b, h, i] > MASK_VALUE / 2
                if not mask[b, i] or vis.sum() < 2:
                    continue
                z = logits[b, h, i][vis].astype(np.float64)
                p = np.exp(z - z.max())
                p /= p.sum()
                ent.append(-np.sum(p * np.log(p)) / np.log(vis.sum()))
                mx.append(p.max())
                full = np.zeros(L)
                full[vis] = p
                rows.append(full / np.linalg.norm(full))
            pairs = [rows[i] @ rows[j] for i in range(len(rows)) for j in range(len(rows))
                     if i != j]
            cos.append(np.mean(pairs) if pairs else 0.0)
        out["entropy"][b], out["max_weight"][b] = np.mean(ent), np.mean(mx)
        out["row_cosine"][b] = np.mean(cos)
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_the_attention_metrics_match_the_float64_reference(causal):
    rng = np.random.default_rng(1)
    B, H, L = 3, 2, 6
    logits = rng.standard_normal((B, H, L, L)) * 3
    mask = np.ones((B, L), bool)
    mask[0, 4:] = mask[2, 5:] = False
    visible = mask[:, None, None, :] & (np.tril(np.ones((L, L), bool)) if causal else True)
    logits = np.where(visible, logits, MASK_VALUE).astype(np.float32)
    got = iv.sequence_metrics(jnp.asarray(logits), jnp.asarray(mask))
    want = _reference_metrics(logits, mask)
    for m in iv.METRICS:
        np.testing.assert_allclose(got[m], want[m], rtol=1e-5, atol=1e-6, err_msg=m)


def test_identical_rows_agree_fully_and_one_to_one_rows_not_at_all():
    L = 5
    same = np.tile(np.array([4.0, 0, 1, 0, 0], np.float32), (1, 1, L, 1))
    one_to_one = np.where(np.eye(L, dtype=bool), 50.0, 0.0).astype(np.float32)[None, None]
    mask = jnp.ones((1, L), bool)
    assert float(iv.sequence_metrics(jnp.asarray(same), mask)["row_cosine"][0]) == \
        pytest.approx(1.0, abs=1e-6)
    assert float(iv.sequence_metrics(jnp.asarray(one_to_one), mask)["row_cosine"][0]) == \
        pytest.approx(0.0, abs=1e-6)


def test_the_block_alone_equals_the_whole_model_patched():
    family = registry.families()["gpt2"]
    cfg = family.config_from_hf({"model_type": "gpt2", "vocab_size": 64, "n_embd": 16,
                                 "n_layer": 2, "n_head": 2, "n_positions": 32})
    params = family.init_params(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (5, 9), 0, 64)
    mask = np.ones((5, 9), bool)
    mask[0, 6:] = False
    res = iv.measure(family, cfg, params, (tokens, None, jnp.asarray(mask)), mask, 2, 0)
    table = iv.arms(2)
    ops = iv.operands(table, iv.random_directions(0, 1, 2, 16))
    op = {k: v[1] for k, v in ops.items()}  # remove_mean/without_first/fixed_norm
    run = patching.run(family, cfg, params, tokens, mask_BxL=jnp.asarray(mask),
                       patches={"blocks.1.resid_pre": iv.common_component_patch(
                           op, jnp.asarray(mask))}, read=["blocks.1.attn_logits"])
    whole = iv.sequence_metrics(run.cache["blocks.1.attn_logits"], jnp.asarray(mask))
    layer = res["layers"][1]
    for m in iv.METRICS:
        alone = np.add(layer["baseline"][m], layer["arms"][table[1]["name"]][m])
        np.testing.assert_allclose(whole[m], alone, atol=1e-5, err_msg=m)
    assert [layer["layer"] for layer in res["layers"]] == [0, 1]


def _planted_layer(seed, s):
    """One synthetic 'layer': a post-LN attention sublayer whose queries read only the direction
    u (query kernel α·u wᵀ), on states z + s·u, z isotropic Gaussian; its results entry."""
    rng = np.random.default_rng(seed)
    D, B, L = 16, 8, 12
    cfg = BlockConfig(d_model=D, num_heads=2, d_ff=32, use_mlp=False)
    variables = Block(cfg).init(jax.random.key(seed), jnp.zeros((1, 2, D)))
    u = rng.standard_normal(D)
    u /= np.linalg.norm(u)
    w = rng.standard_normal(D)
    w /= np.linalg.norm(w)
    params = jax.tree_util.tree_map(lambda a: a, variables["params"])
    params["attention"]["query"]["kernel"] = jnp.asarray(2.0 * np.outer(u, w), jnp.float32)
    params["attention"]["key"]["kernel"] = jnp.asarray(rng.standard_normal((D, D)) / np.sqrt(D),
                                                       jnp.float32)
    x = jnp.asarray(rng.standard_normal((B, L, D)) + s * u, jnp.float32)
    mask = np.ones((B, L), bool)
    table = iv.arms(8)
    ops = iv.operands(table, iv.random_directions(seed, 0, 8, D))
    got = iv.block_metrics_fn(cfg)({"params": params}, x, (jnp.asarray(mask),), {},
                                   jnp.asarray(mask), ops)
    metrics = {m: np.asarray(got[m], np.float64) for m in iv.METRICS}
    return iv.layer_result(seed, metrics, table, iv.state_norms(x, mask))


@pytest.fixture(scope="module")
def synthetic():
    return {s: {"num_sequences": 8, "layers": [_planted_layer(seed, s) for seed in range(4)]}
            for s in (0.0, 4.0)}


def test_isotropic_states_cannot_pass_the_rule(synthetic):
    models = {"isotropic": synthetic[0.0]}
    for part in verdict.PARTS:
        assert verdict.part_rule(models, part) == verdict.FAILS
    assert verdict.part_rule(models, "3s", min_effect=0.0) == verdict.FAILS
    # Without the effect floor, the row cosine passes in 2 of the 4: the sample mean of 96
    # isotropic tokens is a real, small common component (‖μ‖ ≈ ‖h‖/√96) that these queries
    # read, and a random direction is not. The floor (MIN_EFFECT) is what keeps it out.
    assert len(verdict.model_test(synthetic[0.0], "3c", min_effect=0.0)["passing"]) == 2
    for layer in synthetic[0.0]["layers"]:
        test = verdict.layer_test(layer, "3s", min_effect=0.0)
        assert abs(test["entropy"]["mean"]) < 0.005 and abs(test["max_weight"]["mean"]) < 0.005
        assert abs(verdict.layer_test(layer, "3c")["row_cosine"]["mean"]) < 0.01


def test_a_planted_common_direction_passes_the_rule(synthetic):
    models = {"planted": synthetic[4.0]}
    assert verdict.part_rule(models, "3s") == verdict.HOLDS
    assert verdict.part_rule(models, "3c") == verdict.HOLDS
    both = {"planted": synthetic[4.0], "isotropic": synthetic[0.0]}
    assert verdict.part_rule(both, "3s") == verdict.PARTLY
    line = verdict.summary_line("planted", synthetic[4.0], "3s")
    assert line.startswith("planted: 3 of 4 blocks pass")
    few = {"few": {**synthetic[4.0], "num_sequences": 3}}
    assert verdict.part_rule(few, "3s") == verdict.NOT_TESTABLE
    assert verdict.part_rule({}, "3s") == verdict.NOT_MEASURED
