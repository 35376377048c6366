r"""Training throughput: the project's training step, run by its own loop, against a
PyTorch peer of the same model and update (benchmarks/train_torch.py), in one process on one card.

  python -m benchmarks.train_throughput --config=benchmarks/configs/train_throughput.py \
      --workdir=DIR                                      # train:gpu, TF32 and bf16
  python -m benchmarks.train_throughput --config=benchmarks/configs/train_throughput.py:cpu \
      --workdir=DIR                                      # train:small on the CPU

Per precision ('default' = TF32 matmuls, 'bfloat16' = bf16 compute with float32 master weights;
PyTorch: autocast), it times `warmup_steps` then `steps` updates, `repeats` times (best kept):

  jax_<core>_<loop>        the step `anisotropy-jax train` runs (`training.loop.compile_run` of the
                           config) for each `model.attention_impl` of `jax_attention` ('auto',
                           'xla', 'dot_product', 'flash'), named by the core it resolves to here
                           ('xla'; 'dot_product': cuDNN's fused attention on GPUs at bf16, XLA's
                           own elsewhere; 'flash': the Pallas flash kernels, for the config's
                           `attention_normalization` too), each core timed once, a core that
                           normalisation rules out skipped; `auto_attention_core` says which
                           one `train` uses. Loop 'async' is the training loop's (batches
                           prefetched by `loop.Prefetch`, metrics read back every `log_every`
                           steps), 'sync' (xla only) reads the metrics back every step and puts
                           each batch on the device in the loop (the loop before prefetch and
                           async readback), 'scanK' runs K steps per dispatch (one jitted lax.scan
                           over K prefetched batches; metrics read back every `log_every` steps)
  torch_<mode>             eager or torch.compile(mode) of the peer; `fused` AdamW on CUDA

and reports tokens/s, ms per step, tokens per CPU second (process time, all threads), MFU and
peak memory. FLOPs per step = (6·N + 12·layers·d·L)·B·L
(N: the parameters of the matmuls, the position table excluded; the attention term counts the
full L×L products, as PaLM's MFU does, though half is masked). MFU is quoted against the card's
nominal dense peak (H100 SXM: 989 TFLOP/s bf16, 495 TFLOP/s TF32) and against the measured rate
of one n×n×n matmul. Writes DIR/train_throughput.json (with provenance) after every variant.
"""
from __future__ import annotations

import os
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # PyTorch shares the card

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from anisotropy_jax import cli  # noqa: E402



def _define_flags():
    """Defined only when run as a script (see benchmarks/benchmark.py:_define_flags)."""
    global _CONFIG, _WORKDIR
    _CONFIG = config_flags.DEFINE_config_file(
        "config", None, "benchmarks/configs/train_throughput.py[:cpu|:smoke]", lock_config=False)
    _WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (train_throughput.json).")

NOMINAL_PEAK = {"H100": {"bfloat16": 989.4e12, "default": 494.7e12},
                "H200": {"bfloat16": 989.4e12, "default": 494.7e12}}


def train_config(c, precision: str, attention_impl: str = "auto"):
    """The TrainConfig of `train:<c.train_variant>` at `precision` with `model.attention_impl`
    `attention_impl`, `steps` covering the benchmark (the schedule's length) and the global batch
    `c.batch_size` unless 0."""
    from anisotropy_jax.config import train_config_from_mapping
    from anisotropy_jax.configs.train import get_config

    cfg = get_config(c.train_variant)
    cfg.model.precision = precision
    cfg.model.attention_impl = attention_impl
    cfg.model.attention_normalization = c.get("attention_normalization", "softmax")
    if c.get("batch_size"):
        cfg.data.batch_size = cfg.eval_batch_size = c.batch_size
    cfg.steps = c.warmup_steps + c.steps * c.repeats + 1
    cfg.optim.warmup_steps = min(cfg.optim.warmup_steps, cfg.steps)
    return train_config_from_mapping(cfg)[0]


def flops_per_step(config) -> float:
    m, d = config.model, config.data
    matmul_params = (m.num_layers * (4 * m.d_model ** 2 + 2 * m.d_model * m.d_ff)
                     + 256 * m.d_model)
    per_token = 6 * matmul_params + 12 * m.num_layers * m.d_model * d.seq_len
    return float(per_token * d.batch_size * d.seq_len)


def _timed(run, c) -> tuple[list[float], list[float]]:
    """Wall and process CPU seconds per step of `repeats` runs of `steps` steps. The CPU time
    (every thread of the process) is what a shared, loaded machine cannot inflate by making the
    process wait: on the 2-core CPU the ratio is quoted for both."""
    times, cpu_times = [], []
    for _ in range(c.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        run(c.steps)
        times.append((time.perf_counter() - t0) / c.steps)
        cpu_times.append((time.process_time() - c0) / c.steps)
    return times, cpu_times


def _best(times: list[float], cpu_times: list[float]) -> dict:
    """The fastest repeat's wall and CPU seconds per step, and every repeat's."""
    best = min(range(len(times)), key=times.__getitem__)
    return {"s_per_step": times[best], "all_s_per_step": times,
            "cpu_s_per_step": cpu_times[best], "all_cpu_s_per_step": cpu_times}


def time_jax(config, loop_kind: str, c) -> dict:
    """Best-of-`repeats` seconds per step of the training loop's step for `config` (its own
    `model.attention_impl`)."""
    import jax
    import jax.numpy as jnp

    from anisotropy_jax import data as data_lib
    from anisotropy_jax.studies.training import loop

    fns = loop.compile_run(config)
    stream = data_lib.BatchIterator(config.data)
    state = fns.init()
    example = jax.device_put(stream.batch_at(0), fns.batch_sharded)
    mem = fns.step.lower(state, example).compile().memory_analysis()
    total = c.warmup_steps + c.steps * c.repeats
    batches = loop.Prefetch(stream, fns.batch_sharded, 0, total)
    step_index = 0
    per_call = int(loop_kind[4:]) if loop_kind.startswith("scan") else 1
    multi_step = _multi_step(fns.step, per_call) if per_call > 1 else None

    def run(n):
        nonlocal state, step_index
        pending = []
        if multi_step is not None:  # `per_call` steps per dispatch (lax.scan over the batches)
            for _ in range(n // per_call):
                stacked = jax.tree.map(lambda *xs: jnp.stack(xs),
                                       *[batches.get() for _ in range(per_call)])
                state, metrics = multi_step(state, stacked)
                pending.append(metrics)
                if len(pending) * per_call >= c.log_every:
                    jax.device_get(pending)
                    pending = []
            step_index += n
            jax.device_get(pending)
            jax.block_until_ready(state)
            return
        for _ in range(n):
            if loop_kind == "sync":
                batch = jax.device_put(stream.batch_at(step_index), fns.batch_sharded)
                batches.get()  # keep the prefetcher in step (its batch is the same)
                state, metrics = fns.step(state, batch)
                jax.device_get(metrics)
            else:
                state, metrics = fns.step(state, batches.get())
                pending.append(metrics)
                if len(pending) >= c.log_every:
                    jax.device_get(jax.tree.map(lambda *xs: jnp.stack(xs), *pending))
                    pending = []
            step_index += 1
        if pending:
            jax.device_get(jax.tree.map(lambda *xs: jnp.stack(xs), *pending))
        jax.block_until_ready(state)

    run(c.warmup_steps)
    times, cpu_times = _timed(run, c)
    batches.close()
    stats = jax.devices()[0].memory_stats() or {}
    return {**_best(times, cpu_times),
            "compiled_bytes": int(mem.temp_size_in_bytes + mem.argument_size_in_bytes
                                  + mem.output_size_in_bytes - mem.alias_size_in_bytes),
            "process_peak_bytes": stats.get("peak_bytes_in_use")}


def _multi_step(step, per_call: int):
    """`per_call` applications of the jitted `step` in one program (lax.scan over a stacked
    batch (per_call, B, L)); the state is donated as in the loop's step."""
    import jax

    def run(state, stacked):
        return jax.lax.scan(lambda s, b: step(s, b), state, stacked)

    return jax.jit(run, donate_argnums=0)


def time_torch(config, mode: str, precision: str, c) -> dict:
    import torch

    from anisotropy_jax import data as data_lib
    from benchmarks import train_torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    _, step = train_torch.build(config, mode, precision, device)
    stream = data_lib.BatchIterator(config.data)
    ring = []
    for i in range(8):  # distinct batches, on the device before the clock starts
        b = stream.batch_at(i)
        ring.append((torch.from_numpy(b["inputs"]).long().to(device),
                     torch.from_numpy(b["targets"]).long().to(device)))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def run(n):
        losses = []
        for i in range(n):
            if mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            losses.append(step(*ring[i % len(ring)]))
            if len(losses) >= c.log_every:
                torch.stack(losses).cpu()
                losses = []
        if losses:
            torch.stack(losses).cpu()
        sync()

    run(c.warmup_steps)
    times, cpu_times = _timed(run, c)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else None
    return {**_best(times, cpu_times), "peak_bytes": peak}


def matmul_rate(n: int, precision: str) -> float:
    """Achieved FLOP/s of an n×n×n matmul at `precision` (bf16 inputs for 'bfloat16'; the
    same as benchmarks/benchmark.py's, which defines flags on import)."""
    import jax
    import jax.numpy as jnp

    from benchmarks.profiling import harness

    dtype = jnp.bfloat16 if precision == "bfloat16" else jnp.float32
    a, b = (jax.random.normal(k, (n, n), dtype) for k in jax.random.split(jax.random.key(42)))
    f = jax.jit(lambda x, y: jnp.dot(x, y, precision="highest" if precision == "highest"
                                     else "default", preferred_element_type=jnp.float32))
    return 2 * n ** 3 / harness.time_calls(f, a, b, repeats=3).median_s


def _rates(row: dict, config, peak: float | None, matmul_rate: float) -> dict:
    tokens = config.data.batch_size * config.data.seq_len
    flops = flops_per_step(config) / row["s_per_step"]
    row.update(tokens_per_s=tokens / row["s_per_step"], ms_per_step=1e3 * row["s_per_step"],
               tokens_per_cpu_s=tokens / row["cpu_s_per_step"], model_flops_per_s=flops,
               mfu_of_matmul_rate=flops / matmul_rate,
               mfu=None if peak is None else flops / peak)
    return row


def _attention_configs(c, precision: str) -> list:
    """One TrainConfig per distinct core the `c.jax_attention` values resolve to on this backend
    (`model.attention_impl` set to the resolved core: the same program as 'auto' there)."""
    import jax

    from anisotropy_jax.config import ConfigError, resolve_attention_impl

    cores = {}
    for impl in c.jax_attention:
        try:
            core = resolve_attention_impl(train_config(c, precision, impl).model,
                                          jax.default_backend())
        except ConfigError:  # e.g. 'dot_product' with another normalisation than softmax
            continue
        cores.setdefault(core, train_config(c, precision, core))
    return list(cores.values())


def run_benchmark(c, log=print, write=lambda result: None) -> dict:
    import jax

    from anisotropy_jax.config import resolve_attention_impl

    kind = jax.devices()[0].device_kind
    peaks = next((v for k, v in NOMINAL_PEAK.items() if k in kind), None)
    result = {"device_kind": kind, "precisions": {}}
    for precision in c.precisions:
        config = train_config(c, precision)
        rate = matmul_rate(c.matmul_n, precision)
        out = {"flops_per_step": flops_per_step(config), "matmul_flops_per_s": rate,
               "nominal_peak_flops_per_s": peaks and peaks.get(precision), "variants": {},
               "auto_attention_core": resolve_attention_impl(config.model, jax.default_backend())}
        result["precisions"][precision] = out
        rows = out["variants"]
        for config in _attention_configs(c, precision):
            core = config.model.attention_impl
            for loop_kind in c.jax_loops:
                if loop_kind == "sync" and core != "xla":
                    continue
                name = f"jax_{core}_{loop_kind}"
                rows[name] = _rates(time_jax(config, loop_kind, c), config, out[
                    "nominal_peak_flops_per_s"], rate)
                log(f"{precision} {name}: {rows[name]['tokens_per_s']:,.0f} tokens/s")
                write(result)
        softmax = config.model.attention_normalization == "softmax"
        for mode in c.torch_modes if softmax else ():  # the peer's attention is a softmax
            name = f"torch_{mode}"
            try:
                rows[name] = _rates(time_torch(config, mode, precision, c), config,
                                    out["nominal_peak_flops_per_s"], rate)
                log(f"{precision} {name}: {rows[name]['tokens_per_s']:,.0f} tokens/s")
            except Exception as err:  # a compile mode that fails is reported, not fatal
                rows[name] = {"error": f"{type(err).__name__}: {err}"[:2000]}
                log(f"{precision} {name}: failed: {rows[name]['error'][:200]}")
            write(result)
        out["ratios"] = ratios(rows, out["auto_attention_core"])
        write(result)
    return result


def ratios(rows: dict, auto_core: str | None = None) -> dict:
    """Best JAX 'async' tokens/s over the best torch.compile mode's and over eager's; with
    `auto_core`, also that of the step `train` runs (`jax_<auto_core>_async`, "train_step")."""
    ok = {k: v for k, v in rows.items() if "tokens_per_s" in v}
    jax_best = max((k for k in ok if k.startswith("jax_") and not k.endswith("_sync")),
                   key=lambda k: ok[k]["tokens_per_s"], default=None)
    compiled = [k for k in ok if k.startswith("torch_") and k != "torch_eager"]
    torch_best = max(compiled, key=lambda k: ok[k]["tokens_per_s"], default=None)
    out = {"jax_best": jax_best, "torch_compile_best": torch_best}
    if jax_best and torch_best:
        out["over_best_torch_compile"] = ok[jax_best]["tokens_per_s"] / ok[torch_best][
            "tokens_per_s"]
    train_row = f"jax_{auto_core}_async"
    if train_row in ok:
        out["train_step"] = train_row
        if torch_best:
            out["train_step_over_best_torch_compile"] = (ok[train_row]["tokens_per_s"]
                                                         / ok[torch_best]["tokens_per_s"])
    if jax_best and "torch_eager" in ok:
        out["over_torch_eager"] = ok[jax_best]["tokens_per_s"] / ok["torch_eager"]["tokens_per_s"]
        out["over_torch_eager_cpu_time"] = (ok[jax_best]["tokens_per_cpu_s"]
                                            / ok["torch_eager"]["tokens_per_cpu_s"])
    if "jax_xla_sync" in ok and "jax_xla_async" in ok:
        out["async_over_sync"] = (ok["jax_xla_async"]["tokens_per_s"]
                                  / ok["jax_xla_sync"]["tokens_per_s"])
    return out


def main(argv):
    del argv
    c = _CONFIG.value
    cli.workdir(_WORKDIR.value)
    from anisotropy_jax import results

    provenance = results.Provenance(command="python -m benchmarks.train_throughput "
                                    + " ".join(os.sys.argv[1:]))
    path = os.path.join(_WORKDIR.value, "train_throughput.json")

    def write(result):
        results.write_json(path, dict(result, config=results.to_jsonable(c),
                                      provenance=provenance.finish("benchmarks.train_throughput")))

    run_benchmark(c, write=write)
    print(f"wrote {path}")


if __name__ == "__main__":
    _define_flags()
    app.run(main, flags_parser=cli.parse_flags_or_exit)
