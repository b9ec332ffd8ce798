import pytest
import torch
import torch.nn.functional as F

from regionfed.models import tiny
from regionfed.models.text_features import word_ngram_ids
from regionfed.models.tiny import EinsumSelfAttention, TinyConfig, TinyQueryModel


def test_einsum_attention_matches_torch_sdpa():
    torch.manual_seed(0)
    attn = EinsumSelfAttention(16, 4)
    x = torch.randn(3, 5, 16)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    q = attn.q_proj(x).view(3, 5, 4, 4).transpose(1, 2)
    k = attn.k_proj(x).view(3, 5, 4, 4).transpose(1, 2)
    v = attn.v_proj(x).view(3, 5, 4, 4).transpose(1, 2)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
    ref = attn.out_proj(ref.transpose(1, 2).reshape(3, 5, 16))
    assert torch.allclose(attn(x, mask), ref, atol=1e-5)


def test_misspellings_do_not_collapse_to_one_vector():
    model = TinyQueryModel(TinyConfig(), num_intents=8, num_tags=11, max_len=20)
    words = ["lptop", "laptpo", "shoez", "bananna"]  # none of them a vocabulary word
    ngrams = torch.tensor([word_ngram_ids(w, 2048, 16) for w in words])
    vecs = model.embed_words(ngrams)
    dists = torch.cdist(vecs, vecs)
    assert (dists + torch.eye(4) * 1e9).min() > 1e-3
    # a typo stays closer to its clean word than an unrelated word does
    pair = torch.tensor([word_ngram_ids(w, 2048, 16) for w in ["laptop", "lptop", "banana"]])
    e = model.embed_words(pair)
    assert torch.dist(e[0], e[1]) < torch.dist(e[0], e[2])


def test_padding_does_not_change_real_token_outputs():
    torch.manual_seed(0)
    model = TinyQueryModel(TinyConfig(dim=16, heads=2, ffn_dim=32, ngram_buckets=64),
                           num_intents=8, num_tags=11, max_len=20).eval()
    forms = torch.randint(1, 64, (6, 16))
    forms[0] = 0  # the pad form
    def batch(width):
        tok = torch.tensor([[1, 2, 3] + [0] * (width - 3)])
        cand = torch.tensor([[[4, 5]] * 3 + [[0, 0]] * (width - 3)])
        return {"mask": tok != 0, "form_features": forms, "tok_form": tok, "cand_form": cand,
                "cand_mask": cand != 0, "cand_dist": torch.zeros_like(cand)}
    short, long = model(batch(3)), model(batch(6))
    assert torch.allclose(short["intent"], long["intent"], atol=1e-5)
    assert torch.allclose(short["ner"], long["ner"][:, :3], atol=1e-5)
    assert torch.allclose(short["spell"], long["spell"][:, :3], atol=1e-5)


def test_declared_parameter_groups():
    model = TinyQueryModel(TinyConfig(), num_intents=8, num_tags=11, max_len=20)
    groups = model.parameter_groups()
    names = dict(model.named_parameters())
    assert groups["head"] and all(n in names for n in groups["head"])
    assert len(groups["attention"]) == 2 * 3 * 2  # 2 layers × q,k,v × weight,bias
    assert not set(groups["head"]) & set(groups["attention"])


@pytest.mark.parametrize("max_words", [512, 0])  # all-words matmul, K-candidate gather
def test_a_spell_score_is_the_tokens_query_against_its_candidates_word_vector(
        max_words, monkeypatch):
    """spell[b, l, k] = ⟨q(x_bl), e(cand_blk)⟩/√d + bias[dist_blk], and −1e9 on padding
    candidates, whatever the other words of the batch — both ways of computing it."""
    monkeypatch.setattr(tiny, "SPELL_MATMUL_MAX_WORDS", {True: max_words, False: max_words})
    torch.manual_seed(0)
    model = TinyQueryModel(TinyConfig(dim=16, heads=2, ffn_dim=32, ngram_buckets=64),
                           num_intents=8, num_tags=11, max_len=20).eval()
    with torch.no_grad():
        model.spell_distance_bias.copy_(torch.tensor([0.5, -0.25, 1.0, 2.0]))
    forms = torch.randint(1, 64, (7, 16))
    forms[0] = 0  # the pad form
    tok = torch.tensor([[1, 2, 3], [4, 0, 0]])
    cand = torch.tensor([[[5, 6, 0], [6, 1, 2], [3, 0, 0]], [[2, 4, 6], [0, 0, 0], [0, 0, 0]]])
    dist = torch.randint(0, 4, cand.shape)
    batch = {"mask": tok != 0, "form_features": forms, "tok_form": tok, "cand_form": cand,
             "cand_mask": cand != 0, "cand_dist": dist}
    captured = {}
    model.spell_query.register_forward_hook(lambda m, i, o: captured.update(query=o))
    spell = model(batch)["spell"]
    words = model.embed_words(forms)
    for b, t, k in [(0, 0, 0), (0, 1, 2), (0, 2, 0), (1, 0, 1)]:
        want = captured["query"][b, t] @ words[cand[b, t, k]] / 4.0 \
            + model.spell_distance_bias[dist[b, t, k]]
        assert torch.allclose(spell[b, t, k], want, atol=1e-5)
    assert bool((spell[cand == 0] < -1e8).all())
    with torch.no_grad():  # evaluation computes the same scores
        assert torch.allclose(model(batch)["spell"], spell, atol=1e-5)
