"""Train a small decoder-only transformer language model on synthetic sequences, on xla or the CPU.

    python examples/transformer.py [--device xla|cpu] [--steps N] [--seed S] [--dropout P] [--log-every K]
    python examples/transformer.py --nprocs 2     # data parallel: 2 processes, each a slice of every batch

Token and position embeddings, pre-LayerNorm blocks of causal multi-head attention
(`F.scaled_dot_product_attention(..., is_causal=True)`) and a GELU MLP, dropout, a linear head,
cross-entropy over next tokens, AdamW. Each sequence counts upwards modulo the vocabulary from a
random start with a random stride, so the next token is predictable from the previous two.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Iterator

if __package__ in (None, ""):  # run as a script: make the `examples` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
import torch.nn as nn
import torch.nn.functional as F

from examples._common import Batch, TrainResult, is_xla, main, make_parser, resolve_device, run_loop, shard


@dataclasses.dataclass(frozen=True)
class Config:
    vocab: int = 64
    d_model: int = 64
    heads: int = 4
    layers: int = 2
    seq: int = 32
    batch: int = 8
    dropout: float = 0.1
    lr: float = 3e-3
    weight_decay: float = 0.01
    max_stride: int = 4


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.dropout = cfg.dropout
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(B, T, D)))
        return x + self.drop(self.mlp(self.ln2(x)))


class TinyLM(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        positions = torch.arange(T, device=idx.device)
        x = self.drop(self.tok(idx) + self.pos(positions))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def build(seed: int, cfg: Config = Config()) -> TinyLM:
    """The model, on the CPU, with weights from `seed`."""
    torch.manual_seed(seed)
    return TinyLM(cfg)


def make_optimizer(model: nn.Module, cfg: Config = Config()) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def make_batches(seed: int, steps: int, cfg: Config = Config(), batch: int | None = None) -> Iterator[Batch]:
    """`steps` CPU batches (inputs and next-token targets, int64 [B, T]) from a generator seeded with `seed`."""
    g = torch.Generator().manual_seed(seed + 1)
    size = batch or cfg.batch
    offsets = torch.arange(cfg.seq + 1)
    for _ in range(steps):
        start = torch.randint(0, cfg.vocab, (size, 1), generator=g)
        stride = torch.randint(1, cfg.max_stride + 1, (size, 1), generator=g)
        tokens = (start + stride * offsets) % cfg.vocab
        yield tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def train(device: torch.device | str, steps: int, seed: int = 0, cfg: Config = Config(), *, log_every: int = 0,
          on_step=None, batch: int | None = None) -> TrainResult:
    """Builds the model from `seed`, trains it `steps` steps on `device`, returns losses and final weights.

    With dropout > 0 the masks come from each device's own RNG (seeded from `seed`), so xla and CPU
    runs differ; with `Config(dropout=0.0)` they compute the same function.
    """
    device = resolve_device(device)
    model = build(seed, cfg).to(device)
    if is_xla(device):
        import xladev

        xladev.manual_seed(seed)
    optimizer = make_optimizer(model, cfg)
    return run_loop(model, optimizer, loss_fn, make_batches(seed, steps, cfg, batch), device,
                    log_every=log_every, on_step=on_step)


def train_data_parallel(rank: int, steps: int, seed: int = 0, cfg: Config = Config(), log_every: int = 0) -> TrainResult:
    """One replica of a data-parallel run, for `xladev.launch(train_data_parallel, args=(steps, ...), nprocs=N)`.

    Every replica builds the same model and the same batches, trains on its slice of each batch, and
    `xladev.optimizer_step` averages the gradients, so the run takes the steps of one process training on
    the whole batch. Returns this replica's losses (of its slices) and the final weights.
    """
    import xladev

    device = xladev.device()
    model = build(seed, cfg).to(device)
    xladev.manual_seed(seed)
    optimizer = make_optimizer(model, cfg)
    batches = shard(make_batches(seed, steps, cfg), rank, xladev.world_size())
    return run_loop(model, optimizer, loss_fn, batches, device, log_every=log_every if rank == 0 else 0,
                    label=f"[rank {rank}] ", data_parallel=True)


def _main_data_parallel(args, config: Config) -> None:
    import xladev

    results = xladev.launch(train_data_parallel, args=(args.steps, args.seed, config, args.log_every), nprocs=args.nprocs)
    losses = [sum(step) / len(step) for step in zip(*(r.losses for r in results))]
    print(f"transformer on {args.nprocs} processes: {len(losses)} steps in {results[0].seconds:.2f} s, "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f} (mean over the replicas' slices)")


if __name__ == "__main__":
    parser = make_parser(__doc__.splitlines()[0], steps=40)
    parser.add_argument("--dropout", type=float, default=Config.dropout, help="dropout probability (default 0.1)")
    parser.add_argument("--nprocs", type=int, default=1, help="data-parallel processes on this host (default 1)")
    args = parser.parse_args()
    if not 0.0 <= args.dropout < 1.0:
        raise SystemExit("--dropout must be in [0, 1)")
    config = Config(dropout=args.dropout)
    if args.nprocs > 1:
        _main_data_parallel(args, config)
    else:
        main("transformer", args, lambda device: train(device, args.steps, args.seed, config, log_every=args.log_every))
