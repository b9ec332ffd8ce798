"""``tiny``: a small multi-task query encoder (docs/models.md) sized for CPU federations.

* Token embedding: mean of hashed character n-gram vectors (see
  :mod:`regionfed.models.text_features`), so misspellings share features with clean words
  and the only table is ``ngram_buckets × dim`` (no word table).
* Encoder: pre-LayerNorm transformer layers whose attention is written with ``einsum`` +
  ``softmax`` (``scaled_dot_product_attention`` has no vmap batching rule on CPU, see
  docs/performance.md), so clients can later be trained as one batched computation.
* Heads: intent (masked mean pooling → linear), NER (per-token linear over BIO tags), spell
  (per token, a dot product between a query vector and the n-gram embeddings of the
  candidate clean words, plus a learned bias per edit-distance bucket) — the spell head
  shares the n-gram table instead of owning a vocabulary-sized output layer.
"""

from __future__ import annotations

import math

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch.nn import functional as F

from regionfed.models.ngram_bag import ngram_sum

NUM_DISTANCE_BUCKETS = 4  # deletion distance 0, 1, 2, and "farther" (gold injected in training)
NEG_INF = -1e9  # a finite mask value: -inf rows would give NaN softmaxes on padding
#: the spell head scores a token against all of a batch's U distinct words (then picks its K
#: candidates) up to this U, else gathers the K candidate vectors — with gradients / without.
#: Measured (one thread, default workload, the head with its word vectors): with gradients
#: 0.36× the gather's time at batch 32 (U ≈ 170), 0.61× at batch 512 (U ≈ 1,000), 2× at
#: batch 2,560 (U ≈ 5,000); forward only 0.85× at U ≈ 170, 1.18× at U ≈ 450, 2× at U ≈ 1,000
SPELL_MATMUL_MAX_WORDS = {True: 1024, False: 256}


class TinyConfig(BaseModel):
    """Architecture of the ``tiny`` model."""

    model_config = ConfigDict(extra="forbid")

    name: str = "tiny"
    dim: int = Field(64, gt=0)
    layers: int = Field(2, ge=1)
    heads: int = Field(4, ge=1)
    ffn_dim: int = Field(128, gt=0)
    ngram_buckets: int = Field(2048, ge=16)
    max_ngrams: int = Field(16, ge=2)
    spell_candidates: int = Field(10, ge=2)


def mean_ngram_embedding(table: nn.Embedding, ngrams: torch.Tensor) -> torch.Tensor:
    """A word vector = the mean of its non-padding n-gram vectors: ``(..., G)`` ids →
    ``(..., d)`` (bucket 0 is padding and its row stays zero)."""
    count = (ngrams != 0).sum(-1, keepdim=True).clamp(min=1)
    return ngram_sum(table.weight, ngrams) / count


class EinsumSelfAttention(nn.Module):
    """Multi-head self-attention, softmax(QKᵀ/√d_h)V, with a key padding mask."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} is not divisible by heads {heads}")
        self.heads = heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        h, dh = self.heads, d // self.heads
        q = self.q_proj(x).view(b, n, h, dh)
        k = self.k_proj(x).view(b, n, h, dh)
        v = self.v_proj(x).view(b, n, h, dh)
        # scores laid out (b, h, key, query), normalised over the keys (dim -2): torch's
        # AVX-512 softmax over a short last dim (rows of ~10 keys) is ~3× slower than over
        # a middle dim (fwd + bwd, one thread); same values either way
        scores = torch.einsum("bkhd,bqhd->bhkq", k, q) / math.sqrt(dh)
        scores = scores + (~key_mask)[:, None, :, None].to(scores.dtype) * NEG_INF
        attn = torch.softmax(scores, dim=-2)
        out = torch.einsum("bhkq,bkhd->bqhd", attn, v).reshape(b, n, d)
        return self.out_proj(out)


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, ffn_dim: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = EinsumSelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn_dim), nn.GELU(), nn.Linear(ffn_dim, dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), mask)
        return x + self.ffn(self.norm2(x))


class TinyQueryModel(nn.Module):
    """Multi-task encoder: ``forward(batch)`` → intent, NER and spell-candidate logits."""

    def __init__(self, config: TinyConfig, num_intents: int, num_tags: int, max_len: int
                 ) -> None:
        super().__init__()
        d = config.dim
        self.config = config
        self.ngram_embedding = nn.Embedding(config.ngram_buckets, d, padding_idx=0)
        self.position = nn.Parameter(torch.randn(max_len, d) * 0.02)
        self.layers = nn.ModuleList(
            EncoderLayer(d, config.heads, config.ffn_dim) for _ in range(config.layers)
        )
        self.final_norm = nn.LayerNorm(d)
        self.intent_head = nn.Linear(d, num_intents)
        self.ner_head = nn.Linear(d, num_tags)
        self.spell_query = nn.Linear(d, d)
        self.spell_distance_bias = nn.Parameter(torch.zeros(NUM_DISTANCE_BUCKETS))
        with torch.no_grad():
            nn.init.normal_(self.ngram_embedding.weight, std=0.1)
            self.ngram_embedding.weight[0].zero_()  # the padding bucket stays zero

    def embed_words(self, ngrams: torch.Tensor) -> torch.Tensor:
        return mean_ngram_embedding(self.ngram_embedding, ngrams)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``batch["form_features"]`` (U, G) are the batch's distinct words; ``tok_form`` (B, L)
        and ``cand_form`` (B, L, K) index into them (each distinct word embedded once)."""
        mask = batch["mask"]  # (B, L) bool
        n = mask.shape[1]
        words = self.embed_words(batch["form_features"])  # (U, d)
        # F.embedding, not words[ids]: the same gather, but its backward is a dense embedding
        # backward instead of index_put with accumulation (~13 % of a batched step, vmap)
        x = F.embedding(batch["tok_form"], words) + self.position[:n]
        for layer in self.layers:
            x = layer(x, mask)
        x = self.final_norm(x)
        weights = mask.to(x.dtype)
        pooled = (x * weights[..., None]).sum(1) / weights.sum(1, keepdim=True).clamp(min=1.0)
        query = self.spell_query(x)
        if words.shape[0] <= SPELL_MATMUL_MAX_WORDS[torch.is_grad_enabled()]:
            # every token's query against every distinct word of the batch, then each token's
            # K candidates picked out: the same dot products as gathering the (B, L, K, d)
            # candidate vectors, without that tensor or its scatter-add backward
            spell = torch.matmul(query, words.transpose(0, 1)).gather(-1, batch["cand_form"])
        else:  # large batches: B·L·U products would cost more than the K-candidate gather
            cand = F.embedding(batch["cand_form"], words)  # (B, L, K, d)
            spell = torch.einsum("bld,blkd->blk", query, cand)
        spell = spell / math.sqrt(x.shape[-1])
        spell = spell + self.spell_distance_bias[batch["cand_dist"]]
        spell = spell + (~batch["cand_mask"]).to(spell.dtype) * NEG_INF
        return {
            "intent": self.intent_head(pooled),
            "ner": self.ner_head(x),
            "spell": spell,
        }

    def parameter_groups(self) -> dict[str, list[str]]:
        """Declared groups: ``head`` (task heads) and ``attention`` (Q/K/V projections)."""
        names = [name for name, _ in self.named_parameters()]
        head = [n for n in names if n.startswith(("intent_head", "ner_head", "spell_"))]
        attention = [n for n in names if any(f".attn.{p}_proj." in n for p in "qkv")]
        return {"head": head, "attention": attention}
