"""The figures people read: no legend on the data (every figure of every plotting module, drawn
from the committed results or small made-up ones), and the seeds figures' panels big enough to
read."""
import math
import pathlib

import numpy as np
import pytest

from anisotropy_jax import results

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"


def _read(path):
    return results.read_results(RESULTS / path)


def covering_legends(fig) -> list[str]:
    """'legend over axes title' for every legend (of an axes or of the figure) whose box meets
    the data area of a visible axes, or that reaches outside the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # the canvas save_figure draws on
    canvas.draw()
    renderer = canvas.get_renderer()
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    found = []
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            if ax.get_visible() and box.overlaps(ax.get_window_extent(renderer)):
                found.append(f"legend over {ax.get_title() or ax.get_ylabel()!r}")
        if (box.x0 < -1 or box.y0 < -1 or box.x1 > fig.bbox.x1 + 1
                or box.y1 > fig.bbox.y1 + 1):
            found.append("legend outside the figure")
    return found


def _sweep_figures():
    from anisotropy_jax.plotting import sweep

    for variant, names in (("normalizations", list(sweep.FIGURES)), ("control", list(sweep.FIGURES)),
                           ("default", ["cosine", "norms"])):
        runs = _read(f"sweep/{variant}/results.json")["runs"]
        for name in names:
            yield f"sweep {variant} {name}", lambda f=sweep.FIGURES[name], r=runs: f(r)


def _pretrained_figures():
    from anisotropy_jax.plotting import across_models, pretrained

    doc = _read("pretrained/all-MiniLM-L6-v2/results.json")
    curves = {**doc, "metrics": {run: {n: [math.nan if v is None else v for v in values]
                                       for n, values in metrics.items()}
                                 for run, metrics in doc["metrics"].items()}}
    yield "pretrained cosine_by_layer", lambda: pretrained.cosine_by_layer(curves, "MiniLM")
    yield "pretrained isotropy_by_layer", lambda: pretrained.isotropy_by_layer(curves)
    yield "pretrained drift_vs_cosine", lambda: pretrained.drift_vs_cosine(curves, title="t")
    runs = {name: _read(f"pretrained/{name}/results.json")
            for name in ("all-MiniLM-L6-v2", "paraphrase-MiniLM-L3-v2")}
    yield "across_models", lambda: across_models.across_models_figure(runs)


def _other_figures():
    from anisotropy_jax.plotting import cross_modal as cross_plots
    from anisotropy_jax.plotting import depth, dynamics, embeddings
    from anisotropy_jax.studies import cross_modal

    depth_doc = _read("depth/smoke/results.json")
    for name, make in depth.FIGURES.items():
        yield f"depth {name}", lambda m=make: m(depth_doc)
    emb = _read("report/embeddings/results.json")
    yield "embeddings isotropy", lambda: embeddings.isotropy(emb)
    yield "embeddings training", lambda: embeddings.training(emb)
    models = cross_modal.collect(RESULTS / "cross_modal" / "cross_modal",
                                 tuple(cross_modal.MODELS))
    yield "cross_modal", lambda: cross_plots.cross_modal_figure(models)
    seed = _read("train/clm_small/seed_0/results.json")
    yield "dynamics trajectories", lambda: dynamics.trajectories_figure(seed)
    yield "dynamics entropy_vs_logit_terms", lambda: dynamics.entropy_vs_logit_terms_figure(seed)
    yield "dynamics loss", lambda: dynamics.loss_figure([0, 1, 2], [3.0, 2.0, 1.5], [0, 2],
                                                         [3.1, 1.6])
    yield "extreme natural", lambda: _extreme_figure("report", "natural")
    yield "extreme smoke repeated", lambda: _extreme_figure("smoke", "repeated")


def _extreme_figure(folder, kind):
    from anisotropy_jax.plotting import extreme
    from anisotropy_jax.studies.extreme import claims

    return extreme.layers_figure(claims.load(RESULTS / "extreme" / folder), kind)


def _series_figure():
    from anisotropy_jax.studies.series import report

    steps = np.array([0, 10, 100])
    series = {name: np.random.default_rng(0).uniform(size=(3, 4)) for name in ("a", "b", "c", "d")}
    return report._curves(steps, series, ("a", "b", "c", "d"), ["emb", "1", "2", "3"], "t")


FIGURES = dict([*_sweep_figures(), *_pretrained_figures(), *_other_figures(),
                ("series curves", _series_figure)])


@pytest.mark.parametrize("name", FIGURES)
def test_no_legend_covers_the_data(name):
    import matplotlib.pyplot as plt

    fig = FIGURES[name]()
    try:
        assert fig.legends or any(ax.get_legend() for ax in fig.axes), f"{name}: no legend"
        assert covering_legends(fig) == [], name
    finally:
        plt.close(fig)


def test_the_normalisation_sweep_gives_each_quantity_a_panel_and_each_run_a_short_label():
    from anisotropy_jax.plotting import sweep

    runs = _read("sweep/normalizations/results.json")["runs"]
    fig = sweep.cosine_figure(runs)
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 4  # input, block output, ×2
    (legend,) = fig.legends
    texts = [t.get_text() for t in legend.get_texts()]
    assert "softmax, biased" in texts and "softmax, attention output gate, norm_matched" in texts
    assert not any("attention_normalization=" in t for t in texts)
    styles = sweep.run_styles(list(runs))
    assert len(set(styles.values())) == len(runs)  # every run its own look
    assert {ls for _, ls in styles.values()} == {"-", "--"}  # biased / norm_matched


def test_short_labels_keep_the_fields_that_differ():
    from anisotropy_jax.plotting import sweep

    assert sweep.short_labels(["a=1, b=x", "a=1, b=y"]) == {"a=1, b=x": "x", "a=1, b=y": "y"}
    assert sweep.short_labels(["t=0.5", "t=2"]) == {"t=0.5": "t=0.5", "t=2": "t=2"}
    assert sweep.short_labels(["only one"]) == {"only one": "only one"}
    flags = sweep.short_labels(["g=False, n=a", "g=True, n=a"])
    assert flags == {"g=False, n=a": "g=False", "g=True, n=a": "g"}



def test_the_seeds_figures_are_one_per_group_with_panels_big_enough_to_read():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from anisotropy_jax.plotting import dynamics

    summary = _read("report/training/clm/results.json")  # 51 quantities, 5 seeds
    figures = dynamics.seeds_figures(summary)
    assert set(figures) <= set(dynamics.SEEDS_GROUPS) and len(figures) >= 6
    drawn = []
    for group, fig in figures.items():
        FigureCanvasAgg(fig).draw()
        panels = [ax for ax in fig.axes if ax.get_visible()]
        drawn += [ax.get_title() for ax in panels]
        assert len(panels) <= 12, group
        width, height = fig.get_size_inches()
        assert width <= 16 and height <= 9.5, (group, width, height)
        for ax in panels:  # the data area, in inches (at 120 dpi: ≥ 360 × 240 pixels)
            box = ax.get_position()
            assert box.width * width >= 3.0 and box.height * height >= 2.0, (group, box)
    assert len(drawn) == len(summary["quantities"])  # every quantity, once
    assert dynamics.seeds_group("heads_mean/delta_max_key_term_minus_control") == "contrasts"
    assert dynamics.seeds_group("heads_mean/delta_max_control") == "intervention"
    assert dynamics.seeds_group("intermediate_cross_sequence_cosine") == "anisotropy"
    rows = [ax.get_title() for ax in figures["intervention"].axes][:4]
    assert all(title.startswith("delta entropy") for title in rows)  # a row per statistic


def test_the_extreme_token_figure_has_a_panel_per_metric_and_a_line_per_model():
    from anisotropy_jax.plotting import extreme
    from anisotropy_jax.studies.extreme import claims

    models = claims.load(RESULTS / "extreme" / "report")
    fig = extreme.layers_figure(models, "random")  # text models only: no image or audio
    text = [name for name, m in models.items() if "random" in m["inputs"]]
    assert 0 < len(text) < len(models)
    assert [ax.get_ylabel() for ax in fig.axes] == [p[2] for p in extreme.PANELS]
    for ax in fig.axes:
        assert [line.get_label() for line in ax.get_lines() if not line.get_label().startswith(
            ("_", "1,000"))] == text
        assert len(ax.collections) == len(text)  # each model's untrained band
    assert set(extreme.input_kinds(models)) == {"natural", "random", "repeated", "repeated_bos",
                                                "repeated_no_bos"}
