"""The untrained-block bias sweep (the project's main job; SCIENCE.md, DESIGN.md).

  python experiments/bias_sweep.py --config=experiments/configs/bias_sweep.py[:VARIANT] \
      --workdir=DIR [--config.FIELD=VALUE ...] [--distributed]

Writes into DIR: config.json (at the start), results.json and results.npz (at the end, atomically:
an interrupted run leaves no results.json), figures/{cosine,norms,attention,query_key}.png, and
prints progress per chunk and a compact table. A bad flag or config exits with status 2 and one
line naming the field, before anything is compiled.
"""
from __future__ import annotations

import pathlib
import re
import sys

from absl import app, flags
from ml_collections import config_flags

from anisotropy_jax import results, sweep
from anisotropy_jax.config import ConfigError

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Sweep config file, e.g. experiments/configs/bias_sweep.py[:variant].",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (created if missing).")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", False, "Call jax.distributed.initialize() first (one process per host).")


def _fail(message: str) -> None:
    print(f"bias_sweep: {' '.join(str(message).split())}", file=sys.stderr)
    sys.exit(2)


def _parse_flags(argv: list[str]) -> list[str]:
    """absl parsing, but any flag or config-file error becomes one line and exit status 2."""
    try:
        rest = flags.FLAGS(argv)
    except (flags.Error, ValueError, TypeError, AttributeError) as err:
        bare = str(err).replace("\\", "").strip("'\" ")
        unknown = [a.split("=")[0] for a in argv
                   if a.startswith("--config.") and a.split("=")[0].split(".")[-1] == bare]
        if unknown:  # ml_collections' KeyError for an override of a field the config lacks
            _fail(f"bad flag: {unknown[0]}: unknown config field {bare!r}")
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        # A config file that raised: keep its flag and the exception's last line, not the traceback.
        _fail(f"bad flag: {lines[0].split(': Error whilst')[0]}: {lines[-1]}"
              if len(lines) > 1 else f"bad flag: {lines[0] if lines else err!r}")
    try:
        if _CONFIG.value is None:
            _fail("bad flag: --config is required")
        list(_CONFIG.value)  # ml_collections reports a config file that failed to load lazily
    except OSError as err:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        _fail(f"bad flag: --config: {lines[-1] if lines else err}")
    if not _WORKDIR.value:
        _fail("bad flag: --workdir is required")
    return rest


def _run_summary(label: str, result: sweep.SweepResult) -> dict:
    cfg = result.config
    return {
        "label": label,
        "sweep_config": cfg,
        "bias_norms": result.bias_norms.tolist(),
        "seq_len": cfg.seq_len,
        "d_model": cfg.block.d_model,
        "metrics": sweep.summarize(result.per_seed),
        "closed_forms": sweep.compare_with_closed_forms(cfg, result.bias_norms, result.per_seed),
        "trends": sweep.trends(result.bias_norms, result.per_seed),
        "chunk_layout": result.layout,
        "num_devices": result.num_devices,
        "seconds": result.seconds,
        "first_chunk_seconds_incl_compile": result.first_chunk_seconds,
    }


def _print_table(run: dict) -> None:
    s = run["bias_norms"]
    rows = list(range(len(s)))
    if len(rows) > 12:  # compact: about 10 rows, first and last included
        rows = sorted(set(round(i * (len(s) - 1) / 9) for i in range(10)))
    m = run["metrics"]
    forms = run["closed_forms"]
    columns = [("in cos", m["input_cosine"]["mean"]),
               ("F1", forms["input_cosine"]["predicted"]),
               ("out cos", m["output_cosine"]["mean"]),
               ("attn xseq", m.get("attention_output_cross_sequence_cosine", {}).get("mean")),
               ("H/lnL", m["attention_entropy_normalized"]["mean"]),
               ("max p", m["attention_max"]["mean"]),
               ("|q|", m["query_norm"]["mean"]),
               ("F2", forms.get("query_norm", {}).get("predicted")),
               ("cos(q̄,k̄)", m["mean_query_key_cosine"]["mean"]),
               ("|out|", m["output_norm"]["mean"])]
    columns = [(name, values) for name, values in columns if values is not None]
    print(f"\n{run['label']}  (mean over seeds; F1/F2: SCIENCE.md closed forms)")
    print(f"{'s':>9} " + " ".join(f"{name:>9}" for name, _ in columns))
    for i in rows:
        print(f"{s[i]:9.3g} " + " ".join(f"{values[i]:9.4g}" for _, values in columns))
    for name, form in forms.items():
        rel = form["max_rel_deviation"]
        print(f"  {form['formula']}: max |measured - predicted| = {form['max_abs_deviation']:.3g}"
              + (f" (max relative {rel:.2%})" if rel is not None else "")
              + f" at s = {form['worst_s']:g}")
    for name, t in run["trends"].items():
        print(f"  {name} {t['direction']} from {t['first']:.4g} to {t['last']:.4g} "
              f"({t['fraction_of_steps_in_direction']:.0%} of the steps of s)")


def _safe_name(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_")


def main(argv: list[str]) -> None:
    del argv
    try:
        sweeps = sweep.sweep_configs_from_mapping(_CONFIG.value)
    except ConfigError as err:
        _fail(f"config error: {err}")
    if _DISTRIBUTED.value:
        import jax
        jax.distributed.initialize()
    try:
        run(sweeps, _CONFIG.value, pathlib.Path(_WORKDIR.value))
    except FloatingPointError as err:
        print(f"bias_sweep: {err}", file=sys.stderr)
        sys.exit(1)


def run(sweeps: list[tuple[str, sweep.SweepConfig]], config: object,
        workdir: pathlib.Path) -> dict:
    """Runs validated sweeps and writes every output into `workdir`; returns results.json's dict.

    results.json is written last and atomically: a run that fails or is interrupted leaves none
    (config.json, written first, says what was attempted).
    """
    import jax  # only after validation; nothing is compiled before this point

    writer = jax.process_index() == 0
    provenance = results.Provenance()
    if writer:
        results.write_json(workdir / "config.json", {"config": config, "sweeps": dict(sweeps)})
    mesh = sweep.grid_mesh()
    print(f"bias sweep: {len(sweeps)} run(s) on {mesh.size} device(s) "
          f"({jax.devices()[0].device_kind}); workdir {workdir}", flush=True)

    runs, raw = {}, {}
    for label, cfg in sweeps:
        def progress(p, label=label):
            print(f"[{label}] chunk {p.index}/{p.total}  seeds {p.seeds[0]}-{p.seeds[1]}  "
                  f"s {p.bias_norms[0]:.3g}..{p.bias_norms[1]:.3g}  {p.seconds:.1f} s", flush=True)
        result = sweep.run_sweep(cfg, mesh=mesh, progress=progress)
        runs[label] = _run_summary(label, result)
        raw[label] = result

    first = next(iter(runs.values()))
    doc = {
        "provenance": provenance.finish(),
        "config": config,
        "bias_norms": first["bias_norms"],
        "metrics": first["metrics"],
        "closed_forms": first["closed_forms"],
        "trends": first["trends"],
        "runs": runs,
    }
    if not writer:
        return doc
    arrays = {"labels": list(runs)}
    for label, result in raw.items():  # (seeds, s) per metric, (seeds, s, heads) per head
        prefix = _safe_name(label)
        arrays[f"{prefix}__bias_norms"] = result.bias_norms
        arrays.update({f"{prefix}__{k}": v for k, v in result.per_seed.items()})
        arrays.update({f"{prefix}__per_head__{k}": v for k, v in result.per_head.items()})
    figures = {name: make(runs) for name, make in _figures().items()}
    for name, fig in figures.items():
        results.save_figure(fig, workdir / "figures" / f"{name}.png")
    results.write_npz(workdir / "results.npz", arrays)
    results.write_json(workdir / "results.json", doc)  # last: its presence means a complete run
    for summary in runs.values():
        _print_table(summary)
    print(f"\nwrote {workdir}/results.json, results.npz, config.json, figures/"
          f"{{{','.join(figures)}}}.png in {doc['provenance']['wall_seconds']:.0f} s")
    return doc


def _figures():
    from anisotropy_jax.plotting import sweep as sweep_plots

    return sweep_plots.FIGURES


if __name__ == "__main__":
    app.run(main, flags_parser=_parse_flags)
