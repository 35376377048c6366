"""Slow, obviously correct float64 numpy references for the metrics (loops over pairs)."""
import itertools

import numpy as np


def cosine(a, b):
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def average_cosine(x_NxD):
    n = len(x_NxD)
    return np.mean([cosine(x_NxD[i], x_NxD[j]) for i in range(n) for j in range(n) if i != j])


def cross_and_within_cosine(x_BxLxD, mask_BxL=None):
    b, l, _ = x_BxLxD.shape
    mask_BxL = np.ones((b, l), bool) if mask_BxL is None else mask_BxL
    tokens = [(s, t) for s in range(b) for t in range(l) if mask_BxL[s, t]]
    cross, within = [], []
    for (s1, t1), (s2, t2) in itertools.permutations(tokens, 2):
        c = cosine(x_BxLxD[s1, t1], x_BxLxD[s2, t2])
        (within if s1 == s2 else cross).append(c)
    return np.mean(cross), np.mean(within)


def isoscore_algorithm(x_NxD):
    """Rudman et al. 2022, Algorithm 1, step by step (PCA, variance vector, defect, k)."""
    x = x_NxD - x_NxD.mean(0)
    cov = np.cov(x.T)
    _, vecs = np.linalg.eigh(cov)
    reoriented = x @ vecs
    var = np.var(reoriented, axis=0, ddof=1)
    d = len(var)
    var_hat = np.sqrt(d) * var / np.linalg.norm(var)
    defect = np.linalg.norm(var_hat - np.ones(d)) / np.sqrt(2 * (d - np.sqrt(d)))
    k = (d - defect ** 2 * (d - np.sqrt(d))) ** 2 / d ** 2
    return (d * k - 1) / (d - 1)


def partition_isotropy(w_NxD):
    _, vecs = np.linalg.eigh(w_NxD.T @ w_NxD)
    z = []
    for c in vecs.T:
        for sign in (1.0, -1.0):
            z.append(sum(np.exp(sign * np.dot(w, c)) for w in w_NxD))
    return min(z) / max(z)


def effective_rank(x_NxD, center=False):
    if center:
        x_NxD = x_NxD - x_NxD.mean(0)
    s = np.linalg.svd(x_NxD, compute_uv=False)
    p = s / s.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def top_pc_share(x_NxD, center=True):
    if center:
        x_NxD = x_NxD - x_NxD.mean(0)
    s = np.linalg.svd(x_NxD, compute_uv=False)
    return float(s[0] ** 2 / (s ** 2).sum())


def attention_stats(logits_QxK):
    """Entropy, max and first-position mass of each query, with a per-row loop."""
    ent, mx, first = [], [], []
    for row in logits_QxK:
        p = np.exp(row - row.max())
        p /= p.sum()
        ent.append(-sum(pi * np.log(pi) for pi in p if pi > 0))
        mx.append(p.max())
        first.append(p[0])
    return np.array(ent), np.array(mx), np.array(first)


def query_key_geometry(q_BxLxHxDh, k_BxLxHxDh):
    b, l, h, dh = q_BxLxHxDh.shape
    out = {name: np.zeros(h) for name in ("query_norm", "key_norm", "mean_query_norm",
                                           "mean_key_norm", "mean_query_key_cosine",
                                           "mean_query_key_dot")}
    for head in range(h):
        qs = [q_BxLxHxDh[i, j, head] for i in range(b) for j in range(l)]
        ks = [k_BxLxHxDh[i, j, head] for i in range(b) for j in range(l)]
        mq, mk = sum(qs) / len(qs), sum(ks) / len(ks)
        out["query_norm"][head] = np.mean([np.linalg.norm(v) for v in qs])
        out["key_norm"][head] = np.mean([np.linalg.norm(v) for v in ks])
        out["mean_query_norm"][head] = np.linalg.norm(mq)
        out["mean_key_norm"][head] = np.linalg.norm(mk)
        out["mean_query_key_cosine"][head] = cosine(mq, mk)
        out["mean_query_key_dot"][head] = np.dot(mq, mk) / np.sqrt(dh)
    return out


def _softmax_visible(row, visible):
    """Probabilities of one query over its visible keys (0 elsewhere), float64."""
    p = np.zeros(len(row))
    kept = row[visible]
    e = np.exp(kept - kept.max())
    p[visible] = e / e.sum()
    return p


def categorical_attention(logits_QxK, visible_QxK=None):
    """Query agreement, row cosine and query-key information of one attention matrix, with loops
    over queries and over pairs of queries; queries with ≤ 1 visible key are left out."""
    q_len, k_len = logits_QxK.shape
    visible_QxK = np.ones((q_len, k_len), bool) if visible_QxK is None else visible_QxK
    counted = [q for q in range(q_len) if visible_QxK[q].sum() > 1]
    rows = {q: _softmax_visible(logits_QxK[q], visible_QxK[q]) for q in counted}
    # Each query votes for its argmax key (for every key of a tied maximum).
    votes = [sum(1 for q in counted if visible_QxK[q, k]
                 and logits_QxK[q, k] == logits_QxK[q][visible_QxK[q]].max())
             for k in range(k_len)]
    agreement = max(votes) / len(counted)
    pairs = [cosine(rows[a], rows[b]) for a in counted for b in counted if a != b]
    row_cos = float(np.mean(pairs)) if pairs else float("nan")

    def entropy(p):
        return -sum(pi * np.log(pi) for pi in p if pi > 0)

    mean_p = sum(rows.values()) / len(counted)
    information = entropy(mean_p) - np.mean([entropy(rows[q]) for q in counted])
    return agreement, row_cos, information


def _log_ratios(x_NxD, n1, n2):
    """log(r_{n2}/r_{n1}) of every distinct point (identical rows counted once, as dadapy's
    remove_identical_points does) whose n1-th neighbour is not at distance 0, with a loop over
    the points (float64)."""
    x = np.unique(np.asarray(x_NxD, np.float64), axis=0)
    logs = []
    for i in range(len(x)):
        r = np.sort(np.linalg.norm(np.delete(x, i, axis=0) - x[i], axis=1))
        if r[n1 - 1] > 0:
            logs.append(np.log(r[n2 - 1] / r[n1 - 1]))
    return np.asarray(logs)


def twonn(x_NxD, fraction=0.9):
    """Facco et al.'s TwoNN: μ_i = r2/r1 of the N points with r1 > 0, sorted, F(μ_(i)) = i/N,
    least-squares fit of −log(1 − F) = d log μ through the origin on the smallest ⌊fraction·N⌋."""
    logs = np.sort(_log_ratios(x_NxD, 1, 2))
    n = len(logs)
    kept = int(np.floor(n * fraction))
    xs = logs[:kept]
    ys = -np.log(1.0 - np.arange(1, kept + 1) / n)
    return float(xs @ ys / (xs @ xs))


def gride(x_NxD, n1, n2):
    """Denti et al.'s GRIDE: the root in d of the likelihood's score
    N/d + Σ_i [(n2 − n1 − 1) ℓ_i / (1 − e^{−d ℓ_i}) − (n2 − 1) ℓ_i], ℓ_i = log(r_{n2}/r_{n1})."""
    from scipy import optimize

    ell = _log_ratios(x_NxD, n1, n2)

    def score(d):
        ratio = np.where(ell > 0, ell / -np.expm1(-d * np.maximum(ell, 1e-300)), 1.0 / d)
        return len(ell) / d + np.sum((n2 - n1 - 1) * ratio - (n2 - 1) * ell)

    return float(optimize.brentq(score, 1e-3, 1e5, xtol=1e-12, rtol=1e-12))
