import json

import pytest
import torch
from safetensors.torch import load_file

from regionfed.io import append_jsonl, save_checkpoint, write_json


def test_atomic_json_never_leaves_a_half_written_file(tmp_path):
    path = tmp_path / "results.json"
    write_json(path, {"a": 1})
    with pytest.raises(ValueError):
        write_json(path, {"a": float("nan")})  # refused (allow_nan=False) mid-serialisation
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temp files left


def test_jsonl_and_checkpoint(tmp_path):
    append_jsonl(tmp_path / "m.jsonl", {"round": 1})
    append_jsonl(tmp_path / "m.jsonl", {"round": 2})
    lines = (tmp_path / "m.jsonl").read_text().splitlines()
    assert [json.loads(x)["round"] for x in lines] == [1, 2]
    save_checkpoint(tmp_path / "c.safetensors", {"w": torch.arange(3.0)})
    assert torch.equal(load_file(str(tmp_path / "c.safetensors"))["w"], torch.arange(3.0))


def _append_many(path, tag, count, size):
    from regionfed.io import append_jsonl

    for i in range(count):
        append_jsonl(path, {"tag": tag, "i": i, "pad": "x" * size})


def test_processes_appending_to_one_log_interleave_whole_lines(tmp_path):
    import json
    import multiprocessing

    path = tmp_path / "metrics.jsonl"
    context = multiprocessing.get_context("spawn")
    # lines far longer than any write buffer: a buffered writer would split them
    workers = [context.Process(target=_append_many, args=(str(path), t, 40, 200_000))
               for t in ("a", "b")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
        assert w.exitcode == 0
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted((e["tag"], e["i"]) for e in lines) == \
        sorted((t, i) for t in ("a", "b") for i in range(40))
