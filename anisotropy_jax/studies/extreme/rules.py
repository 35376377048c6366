"""The thresholds and rules of the extreme-token claims (docs/EXTREME.md): the pre-registered
thresholds ("Pre-registered claims and thresholds") and the rules of the rows as restated after
review ("Restated claims"), each a constant that `claims.py` applies and its table prints."""
from __future__ import annotations

SINK_BLOCK_RATE = 0.5     # a sink block: trained sink rate above this and above every seed's
CARRIED_SHARE = (0.5, 0.75)  # (b): p < 0.5 in every model: does not hold; ≥ 0.75 in every: holds
PC_JUMP = 0.1             # (c): the largest rise of the top-PC share counts if at least this
SAME_LAYER = 1            # (c): two markers agree within this many layers
PC_PRESENT = 0.2          # (d): a top PC to collapse: share at least this
PC_COLLAPSE = 0.5         # (d): collapsed: share without the first token ≤ this × the share
COSINE_KEPT = 0.75        # (d): kept: cosine without the first token ≥ this × the cosine
CONTROL_MARGIN = 0.25     # (b): a control's carried share must stay this far below p
ROTARY = "SmolLM2-135M-Instruct"  # (e)'s model without QK-norm
MASSIVE_ABS = 100.0        # (c2): a massive activation: |a| above this and MASSIVE_CUT× its median
MASSIVE_CUT = 1000.0

# The rules, as the table states them (each verdict function applies its own).
FIRST_TOKEN_RULE = (
    "per causal model measured on one repeated id both with a BOS at position 0 (repeated_bos) "
    "and without (repeated_no_bos): it agrees when it has ≥ 1 sink block with the BOS and 0 "
    "without; holds if every such model agrees, does not hold if none does, partly otherwise")
CARRIED_RULE = (
    f"per model, p = carried share of its sink heads (key 0); controls: the carried share of a "
    f"random key other than 0 in the same sink heads, and of key 0 in the heads that are not "
    f"sink heads; holds if p ≥ {CARRIED_SHARE[1]} in every model with a sink head and every "
    f"control it has is ≤ p − {CONTROL_MARGIN}; partly if p ≥ {CARRIED_SHARE[0]} in every such "
    f"model but a control comes within {CONTROL_MARGIN} of p (carried, but not only in sinks), "
    f"or p is mixed; does not hold if p < {CARRIED_SHARE[0]} in every such model")
COLLAPSE_RULE = (
    f"a collapse state: top-PC share ≥ {PC_PRESENT} and ≤ {PC_COLLAPSE} × it without each "
    f"sequence's first token; the cosine is kept when ≥ {COSINE_KEPT} × it without the first "
    f"token; holds if ≥ 1 collapse state and the cosine kept in all, does not hold if none or "
    f"kept in none. Caveat: the top-PC share is variance-weighted, and the first rows' norms "
    f"(first_token_norm_ratio) make them most of the variance; (d′) applies the same rule to "
    f"the unit rows x/‖x‖, where the norm weighs nothing")
MASSIVE_RULE = (
    "Gemma-3 (QK-norm) against SmolLM2 (none), natural text: lower share of sink blocks; "
    "smaller massive activations, counted only when both the largest top/median ratio and the "
    "largest absolute activation over the states i ≥ 1 are smaller; lower mean average cosine "
    "over the states i ≥ 1; holds if lower on all three, does not hold on none, partly otherwise")

# The claims and their rules, in the table's order.
CLAIMS = ("(a) the first token: sinks on one repeated id with a distinct first token (BOS) and "
          "none without it, in every causal model (Gu et al.'s 'no sinks on repeated tokens', "
          "restated)",
          "(b) a sink head's logit excess is carried by the shared term q̄·(k_sink − k̄), and "
          "less so for a random key (same heads) or for key 0 in non-sink heads",
          "(c1) the first sink block and the top-PC jump are the same layer (±1)",
          "(c2) the first sink block and the first massive activation are the same layer (±1)",
          "(d) removing the first (BOS/[CLS]) token collapses the top-PC share, not the cosine "
          "(variance-weighted: the first rows' norms are most of it)",
          "(d′) (d) on the unit rows x/‖x‖ (the norm weighting removed)",
          "(e) QK-norm (Gemma-3) has fewer sink blocks, smaller massive activations (ratio and "
          "absolute size) and a lower cosine than no QK-norm (SmolLM2)")
RULES = (FIRST_TOKEN_RULE, CARRIED_RULE,
         f"L_sink (first sink block) and L_pc (largest rise ≥ {PC_JUMP} of the top-PC share) "
         f"within ±{SAME_LAYER}: holds in every model with both, does not hold in none",
         f"L_sink and L_mass (first state with |a| > {MASSIVE_ABS:.0f} and > "
         f"{MASSIVE_CUT:,.0f}× the median) within ±{SAME_LAYER}", COLLAPSE_RULE, COLLAPSE_RULE,
         MASSIVE_RULE)
