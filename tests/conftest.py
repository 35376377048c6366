"""Test-wide JAX settings. XLA_FLAGS must be set before jax is first imported: two fake CPU devices
let the sharding tests run on any machine; they change nothing for single-device code."""
import os
import shutil
import tempfile

# XLA:CPU's elemental emitters: compile faster (see `_compile_options` below).
ELEMENTAL_EMITTERS = "--xla_cpu_use_fusion_emitters=false"

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=2"
                           + " " + ELEMENTAL_EMITTERS).strip()
os.environ.setdefault("MPLBACKEND", "Agg")
# One thread for scipy's OpenBLAS, the LAPACK that jaxlib's CPU kernels call (it loads after this
# file; numpy's own copy is already loaded by a plugin). The suite runs one process per core
# anyway, and a worker once hung for good inside tests/test_dynamics.py's analysis: device_get
# waiting, every thread in futex_wait, no CPU use. That program runs several LAPACK
# eigendecompositions that XLA may schedule on two threads at once, and threaded OpenBLAS has
# a history of deadlocks when called concurrently. A mitigation of a likely cause, not a proof.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Most XLA optimisations off: compilation dominates this suite's small shapes on 2 CPU cores (as in
# Flax's examples/lm1b tests); semantics are unchanged. Inherited by the scripts tests start.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

if os.environ.get("JAX_COMPILATION_CACHE_DIR") == os.environ.get("ANISOTROPY_JAX_TEST_CACHE"):
    os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)  # an xdist worker: set again below
import jax  # noqa: E402
import pytest  # noqa: E402
from jax._src import compiler  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")

# XLA:CPU's older elemental emitters instead of its fusion emitters: they compile this suite's small
# programs 2.5-3x faster (a Block's value-and-grad 0.3 s instead of 0.9 s, an eager op 35 ms
# instead of 100 ms, on the 2-core CPU), and compilation is most of the suite's time. They compute
# the same functions; the last bits of float rounding may differ between two programs where the
# default emitters happen to agree. So the tests that compare two differently compiled programs
# bit for bit, or count exact ties, are marked `default_emitters`: they run with XLA's defaults,
# as users compile (the in-memory jit caches are cleared first, so that no program compiled with
# the other emitters is reused), and every other test gets the faster compiler. Set per
# compilation (the `env_options_overrides` that `jax.jit(compiler_options=...)` also uses), since
# XLA_FLAGS is read once per process. The processes the tests start get the elemental emitters
# from XLA_FLAGS (set above).
_default_emitters = False
_get_compile_options = compiler.get_compile_options


def _compile_options(*args, env_options_overrides=None, **kwargs):
    emitters = {"xla_cpu_use_fusion_emitters": _default_emitters}
    env_options_overrides = {**emitters, **(env_options_overrides or {})}
    return _get_compile_options(*args, env_options_overrides=env_options_overrides, **kwargs)


compiler.get_compile_options = _compile_options


def pytest_configure(config):
    # xdist's loadscope sorts the modules by their number of tests unless told not to, which
    # would undo the slow-first order below (`pytest_collection_modifyitems`).
    config.option.loadscopereorder = False
    config.addinivalue_line("markers", "default_emitters: compile with XLA:CPU's default emitters "
                            "(the test compares differently compiled programs bit for bit)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before the test's fixtures: its emitters."""
    global _default_emitters
    wanted = item.get_closest_marker("default_emitters") is not None
    if wanted and not _default_emitters:
        jax.clear_caches()
    _default_emitters = wanted

# JAX's persistent compilation cache for the processes the tests start (scripts, commands,
# notebooks): one folder per run, shared by both xdist workers (they inherit the controller's
# environment), so a program one process compiled is read by the next instead of compiled again
# (the bias-sweep smoke alone runs in a dozen processes). Every compilation is cached, as the
# scripts do (cli.CACHE_MIN_COMPILE_SECONDS). Set after `import jax`: the workers themselves keep
# no persistent cache, since they rarely compile the same program twice and writing every
# executable costs time. Tests that need a cache of their own (cold, or checked for its files)
# still pass their own JAX_COMPILATION_CACHE_DIR.
_CACHE_OWNER = "ANISOTROPY_JAX_TEST_CACHE" not in os.environ
if _CACHE_OWNER:
    os.environ["ANISOTROPY_JAX_TEST_CACHE"] = tempfile.mkdtemp(prefix="anisotropy_jax_test_cache_")
os.environ["JAX_COMPILATION_CACHE_DIR"] = os.environ["ANISOTROPY_JAX_TEST_CACHE"]
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


def pytest_unconfigure(config):
    if _CACHE_OWNER and not hasattr(config, "workerinput"):  # the run's controller, last out
        shutil.rmtree(os.environ["ANISOTROPY_JAX_TEST_CACHE"], ignore_errors=True)


# Scheduling over the xdist workers (`-n 2 --dist loadscope`, the README's command): each module
# runs on one worker, so a module fixture that several of its tests share (trained runs, a
# normalisation grid, compiled sweeps) is built once per run instead of once per worker (the
# training runs alone took about 110 s per build). (`--dist loadgroup` would group only the
# marked modules, but it does not group with this pytest: xdist 3.8 renames `item._nodeid`, which
# pytest 9 no longer reads.) The modules that take longest (pytest's --durations) are scheduled
# first, so that neither worker is left with a long module at the end while the other idles. A
# stale list costs time, not checks.
SLOW_FIRST = ("test_colab", "test_train", "test_report", "test_gemma3",
              "test_pretrained_modalities", "test_normalizations", "test_series",
              "test_cross_modal", "test_extreme", "test_extreme_study_script",
              "test_depth_script", "test_depth", "test_families_causal", "test_commands",
              "test_sweep_normalizations", "test_sweep", "test_sweep_science", "test_cli",
              "test_embeddings", "test_train_throughput", "test_figures", "test_seeds_vmapped",
              "test_train_precision", "test_pretrained_hf", "test_data_parallel")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}

    def module(item) -> str:
        return item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")

    items.sort(key=lambda item: rank.get(module(item), len(rank)))  # stable within a module
