import numpy as np
z = np.load("docs/results/sweep/normalizations/results.npz")
for name in ("softmax", "off_by_one", "sigmoid", "softpick", "clipped_softmax"):
    pre = f"attention_normalization_{name}_attention_output_gate_False_inputs_biased__"
    mx, dot = z[pre + "per_head__attention_max"][:, -1], z[pre + "per_head__mean_query_key_dot"][:, -1]
    print(f"{name}: s = {z[pre + 'bias_norms'][-1]:g}, share of (seed, head) with max w > 0.99: "
          f"{(mx > 0.99).mean():.3f}, with max w < 0.01: {(mx < 0.01).mean():.3f}, "
          f"with mean-query·mean-key > 0: {(dot > 0).mean():.3f}")
