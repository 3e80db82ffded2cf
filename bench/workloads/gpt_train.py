# SPDX-License-Identifier: Apache-2.0
"""A small GPT-style decoder trained on the CPU, as a transformer workload for
measuring what tracing costs. Written in plain torch so that every operator of
attention is visible (no fused scaled_dot_product_attention): token and learned
positional embeddings, L pre-LayerNorm blocks of causal multi-head
self-attention (qkv Linear, split heads, scaled dot product, causal mask by
masked_fill, softmax, output projection) and a 4x GELU MLP, a final LayerNorm
and an LM head. Trained on one fixed batch of random tokens (seed 0) with
cross-entropy and AdamW. Each step (zero_grad, forward, loss, backward,
optimizer step) is timed on its own; the warm-up steps are dropped and the
median of the rest is printed as `gpt_train: N steps, median step X us`.

Usage: gpt_train.py STEPS [--batch B (8)] [--size T (64)] [--warmup W (3)] [--profiler]
       [--vocab V (512)] [--dim D (128)] [--heads H (4)] [--layers L (4)]

--size is the context length T. --profiler runs the timed loop inside
torch.profiler (CPU activity, nothing exported: the cost a user pays for
leaving it on) and then prints `profiler: K events`. Torch's default thread
count is kept on purpose."""
import math

import torch
from torch import nn
from torch.nn import functional as F

import steps


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads, context):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        # A buffer, so that the mask is built once and not on every forward.
        mask = torch.triu(torch.ones(context, context, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = att.masked_fill(self.mask[:t, :t], float("-inf"))
        att = F.dropout(F.softmax(att, dim=-1), p=0.0, training=self.training)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, dim, heads, context):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, context)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, dim, heads, layers, context):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads, context) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.blocks(self.tok(idx) + self.pos(pos))
        return self.head(self.ln(x))


def parse_args():
    p = steps.parser(__doc__, batch=8, size=64, size_help="context length T")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    return p.parse_args()


def lm_loss(logits, y):
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))


def main():
    args = parse_args()
    torch.manual_seed(0)
    model = GPT(args.vocab, args.dim, args.heads, args.layers, args.size)
    opt = torch.optim.AdamW(model.parameters())
    # Next-token targets: the same random sequence shifted by one.
    tokens = torch.randint(0, args.vocab, (args.batch, args.size + 1))
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    steps.train_and_report("gpt_train", args, model, opt, x, y, lm_loss)


if __name__ == "__main__":
    main()
