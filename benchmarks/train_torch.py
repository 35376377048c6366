"""The PyTorch peer of the training benchmark (benchmarks/train_throughput.py): the `train` (causal LM)
causal LM written the way a PyTorch user writes it (nanoGPT style), step for step the same model
and update as `anisotropy_jax.studies.training.step.train_step`.

  model    byte embedding (V = 256) + learned positions → num_layers pre-LN blocks (LayerNorm eps
           1e-5; one fused q/k/v Linear; `F.scaled_dot_product_attention(is_causal=True)`; exact
           GELU MLP) → final LayerNorm → logits against the tied embedding + an output bias
  init     kernels and embeddings N(0, 0.02²), biases 0, LayerNorm gain 1 and bias 0
  update   float32 cross-entropy, global-norm clipping, AdamW (decay on ndim ≥ 2 only) with the
           project's warmup + cosine schedule; `fused=True` on CUDA
  modes    'eager' or a `torch.compile` mode ('default', 'reduce-overhead',
           'max-autotune-no-cudagraphs') of the model; precision 'default' (TF32 matmuls) or
           'bfloat16' (autocast)

`load_jax_params` copies a JAX run's parameters in, so the tests check that both compute the
same loss.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, heads: int, d_ff: int, eps: float):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=eps), nn.LayerNorm(d, eps=eps)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc_in, self.fc_out = nn.Linear(d, d_ff), nn.Linear(d_ff, d)

    def forward(self, x):
        b, length, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, length, self.heads, d // self.heads).transpose(1, 2)
                   for t in (q, k, v))
        mixed = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(mixed.transpose(1, 2).reshape(b, length, d))
        return x + self.fc_out(F.gelu(self.fc_in(self.ln2(x))))


class CausalLM(nn.Module):
    def __init__(self, vocab: int, max_len: int, d: int, heads: int, d_ff: int, layers: int,
                 eps: float = 1e-5, init_std: float = 0.02):
        super().__init__()
        self.token = nn.Embedding(vocab, d)
        self.position = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d, heads, d_ff, eps) for _ in range(layers))
        self.final_norm = nn.LayerNorm(d, eps=eps)
        self.output_bias = nn.Parameter(torch.zeros(vocab))
        for name, p in self.named_parameters():
            if p.ndim >= 2:
                nn.init.normal_(p, std=init_std)
            elif not name.endswith("weight"):  # biases (LayerNorm gains stay 1)
                nn.init.zeros_(p)

    def forward(self, tokens):
        x = self.token(tokens) + self.position(torch.arange(tokens.shape[1],
                                                            device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.final_norm(x) @ self.token.weight.T + self.output_bias


def load_jax_params(model: CausalLM, params) -> None:
    """Copies the `params` of the JAX `Transformer` (clm, tied) into `model`."""
    p = params["params"]
    t = lambda a: torch.from_numpy(np.array(a, np.float32))  # noqa: E731
    with torch.no_grad():
        model.token.weight.copy_(t(p["token_embedding"]["embedding"]))
        model.position.weight.copy_(t(p["position_embedding"]["embedding"]))
        model.output_bias.copy_(t(p["output_bias"]))
        model.final_norm.weight.copy_(t(p["final_norm"]["scale"]))
        model.final_norm.bias.copy_(t(p["final_norm"]["bias"]))
        for i, block in enumerate(model.blocks):
            b = p[f"block_{i}"]
            att = b["attention"]
            block.qkv.weight.copy_(torch.cat([t(att[n]["kernel"]).T for n in
                                              ("query", "key", "value")]))
            block.qkv.bias.copy_(torch.cat([t(att[n]["bias"]) for n in
                                            ("query", "key", "value")]))
            for mine, theirs in ((block.out, att["out"]), (block.fc_in, b["mlp"]["fc_in"]),
                                 (block.fc_out, b["mlp"]["fc_out"])):
                mine.weight.copy_(t(theirs["kernel"]).T)
                mine.bias.copy_(t(theirs["bias"]))
            for mine, theirs in ((block.ln1, b["attention_norm"]), (block.ln2, b["mlp_norm"])):
                mine.weight.copy_(t(theirs["scale"]))
                mine.bias.copy_(t(theirs["bias"]))


def schedule(optim, steps: int):
    """The project's learning-rate schedule (`learning_rate_schedule`) as a multiplier of
    optim.learning_rate for `torch.optim.lr_scheduler.LambdaLR`."""
    warmup, end = optim.warmup_steps, optim.end_lr_ratio
    decay = max(steps, warmup + 1) - warmup

    def factor(step):
        if warmup and step < warmup:
            return 1 / warmup + (1 - 1 / warmup) * step / warmup
        frac = min(step - warmup, decay) / decay
        return end + (1 - end) * 0.5 * (1 + math.cos(math.pi * frac))
    return factor


class Loss(nn.Module):
    """inputs, targets → mean float32 cross-entropy of `model` (under bf16 autocast when
    `precision` is 'bfloat16'): what torch.compile compiles, loss included (as nanoGPT does)."""

    def __init__(self, model: CausalLM, precision: str, device: str):
        super().__init__()
        self.model, self.bf16, self.device = model, precision == "bfloat16", device

    def forward(self, inputs, targets):
        with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.bf16):
            logits = self.model(inputs)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def make_step(model: CausalLM, loss_fn, optim, steps: int, device: str):
    """step(inputs, targets) → loss tensor (not synchronised): one AdamW update."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": optim.weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=optim.learning_rate,
                            betas=(optim.b1, optim.b2), eps=optim.eps,
                            fused=device == "cuda")
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule(optim, steps))

    def step(inputs, targets):
        loss = loss_fn(inputs, targets)
        loss.backward()
        if optim.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), optim.grad_clip)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach().clone()  # a CUDA graph's output is overwritten by the next replay
    return step


def build(config, mode: str, precision: str, device: str, seed: int = 0):
    """(model, step) for a `TrainConfig` (clm) in `mode` at `precision`."""
    torch.manual_seed(seed)
    torch.backends.cuda.matmul.allow_tf32 = precision != "highest"
    torch.backends.cudnn.allow_tf32 = precision != "highest"
    m = config.model
    model = CausalLM(256, config.data.seq_len, m.d_model, m.num_heads, m.d_ff, m.num_layers,
                     m.layer_norm_eps, m.init_std).to(device)
    loss_fn = Loss(model, precision, device)
    if mode != "eager":
        loss_fn = torch.compile(loss_fn, mode=mode)
    return model, make_step(model, loss_fn, config.optim, config.steps, device)
