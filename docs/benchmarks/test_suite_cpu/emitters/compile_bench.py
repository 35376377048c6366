import time, os, jax, jax.numpy as jnp
from anisotropy_jax.models import block as block_lib
from tests.test_model import SMALL
x = jax.random.normal(jax.random.key(1), (2, 6, 32))
ts=[]
for i in range(4):
    cfg = SMALL.replace(causal=bool(i % 2), dropout_rate=0.0) if hasattr(SMALL,'dropout_rate') else SMALL.replace(causal=bool(i%2))
    b = block_lib.Block(cfg)
    params = b.init(jax.random.key(0), x)
    f = lambda p, x, s=i: jnp.sum(b.apply(p, x * (1 + s))[0] ** 2)
    t = time.time(); c = jax.jit(jax.value_and_grad(f)).lower(params, x).compile(); ts.append(time.time() - t)
t=time.time()
for i in range(30):
    jnp.sin(jnp.ones((i+1, 3))).block_until_ready()
eager=time.time()-t
print(os.environ.get("XLA_FLAGS",""), "compile", [round(v,2) for v in ts], "eager30", round(eager,2))
