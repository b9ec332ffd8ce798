"""ngram_sum: the plain gather-and-sum outside vmap (bit for bit), the same values and
gradients under vmap through its stacked-table rule."""

import pytest
import torch
import torch.nn.functional as F
from torch.func import grad, vmap

from regionfed.models.ngram_bag import ngram_sum


def _reference(table, ngrams, weights):
    return (F.embedding(ngrams, table, padding_idx=0).sum(-2) * weights).sum()


def _ours(table, ngrams, weights):
    return (ngram_sum(table, ngrams) * weights).sum()


@pytest.fixture
def batch():
    generator = torch.Generator().manual_seed(0)
    k, rows, d, words, slots = 5, 40, 8, 12, 6
    tables = torch.randn(k, rows, d, generator=generator)  # row 0 (padding) is not zero
    ngrams = torch.randint(1, rows, (k, words, slots), generator=generator)
    ngrams[:, :, 4:] = 0  # padding slots
    ngrams[0, 0, 0] = 3  # a repeated id within one word
    ngrams[0, 0, 1] = 3
    weights = torch.randn(k, words, d, generator=generator)
    return tables, ngrams, weights


def test_outside_vmap_it_is_the_plain_gather_and_dense_backward_bit_for_bit(batch):
    tables, ngrams, weights = batch
    table, ids, w = tables[0], ngrams[0], weights[0]
    assert torch.equal(ngram_sum(table, ids), F.embedding(ids, table, padding_idx=0).sum(-2))
    ours, reference = grad(_ours)(table, ids, w), grad(_reference)(table, ids, w)
    assert torch.equal(ours, reference)
    assert not ours[0].any()  # the padding row gets no gradient
    leaf = table.clone().requires_grad_()
    _ours(leaf, ids, w).backward()
    assert torch.equal(leaf.grad, reference)


@pytest.mark.parametrize("ids_dim", [0, None])
def test_under_vmap_values_and_gradients_equal_the_plain_computation(batch, ids_dim):
    """Each client its own table (and ids, or one set shared): the stacked rule reads row 0
    for padding ids as nn.Embedding does and gives row 0 of every table no gradient."""
    tables, ngrams, weights = batch
    ids = ngrams if ids_dim == 0 else ngrams[1]
    dims = (0, ids_dim, 0)
    ours = vmap(grad(_ours), in_dims=dims)(tables, ids, weights)
    reference = vmap(grad(_reference), in_dims=dims)(tables, ids, weights)
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
    assert not ours[:, 0].any() and ours.abs().sum() > 0
    values = vmap(ngram_sum, in_dims=dims[:2])(tables, ids)
    want = vmap(lambda t, i: F.embedding(i, t, padding_idx=0).sum(-2), in_dims=dims[:2])(
        tables, ids)
    torch.testing.assert_close(values, want, rtol=1e-5, atol=1e-6)


def test_nested_vmaps_stack_the_tables_twice(batch):
    tables, ngrams, weights = batch
    nested = vmap(vmap(grad(_ours)))
    four = (tables.view(1, 5, *tables.shape[1:]).expand(2, -1, -1, -1),
            ngrams.expand(2, -1, -1, -1), weights.expand(2, -1, -1, -1))
    want = vmap(grad(_reference))(tables, ngrams, weights)
    got = nested(*four)
    for half in got:
        torch.testing.assert_close(half, want, rtol=1e-5, atol=1e-6)


def test_second_derivatives_equal_the_plain_computations(batch):
    """Hessian-vector products through a non-linear loss, outside and under vmap."""
    tables, ngrams, weights = batch

    def squared_ours(table, ids, w):
        return (ngram_sum(table, ids) ** 2 * w).sum()

    def squared_reference(table, ids, w):
        return (F.embedding(ids, table, padding_idx=0).sum(-2) ** 2 * w).sum()

    def hvp(loss):
        def product(table, ids, w):
            return grad(lambda t: (grad(loss)(t, ids, w) * table).sum())(table)
        return product

    ours, reference = hvp(squared_ours), hvp(squared_reference)
    torch.testing.assert_close(ours(tables[0], ngrams[0], weights[0]),
                               reference(tables[0], ngrams[0], weights[0]))
    torch.testing.assert_close(vmap(ours)(tables, ngrams, weights),
                               vmap(reference)(tables, ngrams, weights), rtol=1e-5, atol=1e-5)


def test_the_function_runs_under_torch_func_only(batch, monkeypatch):
    """Plain autograd (the sequential client loop) takes the native ops, without the
    Function's Python overhead; vmap takes the stacked rule."""
    from regionfed.models import ngram_bag

    calls = []
    original = ngram_bag._NgramSum.vmap

    def counted(*args, **kwargs):
        calls.append("vmap")
        return original(*args, **kwargs)

    monkeypatch.setattr(ngram_bag._NgramSum, "vmap", staticmethod(counted))
    tables, ngrams, weights = batch
    leaf = tables[0].clone().requires_grad_()
    assert "NgramSum" not in type(ngram_sum(leaf, ngrams[0]).grad_fn).__name__
    assert calls == []
    vmap(grad(_ours))(tables, ngrams, weights)
    assert calls == ["vmap"]
