"""The on-disk prefix cache: a warm command stores exactly a cold one's samples, a damaged file
is ignored and rewritten, keys that differ miss, and the folder keeps to its bound."""

import logging
import os
import time

import pytest
import torch

from helpers import run_main, sample_args, stored_samples
from zerogap.engine.attention import prefix_attention
from zerogap.engine.hf import _Decoder
from zerogap.engine.prefix_cache import LIMIT_ENV, PrefixCache, weights_state

ENGINE = "zerogap.engine"


def _prefix_files(cache):
    return sorted((cache / "prefix").glob("*.kv"))


def _engine_notes(caplog):
    return [r.getMessage() for r in caplog.records if r.name == ENGINE and "prefix" in
            r.getMessage()]


def test_a_warm_cache_stores_the_samples_of_a_cold_run_and_a_damaged_file_is_rewritten(
        tiny_dir, tmp_path, monkeypatch, caplog):
    cache = tmp_path / "cache"
    monkeypatch.setenv("ZEROGAP_CACHE", str(cache))
    caplog.set_level(logging.INFO, logger=ENGINE)

    def run(name):
        caplog.clear()
        assert run_main(sample_args(tiny_dir, tmp_path / name, "--limit", "4")) == 0
        return stored_samples(tmp_path / name), _engine_notes(caplog)

    monkeypatch.setenv(LIMIT_ENV, "0")  # the cache off: the reference encodes, writes nothing
    cold, notes = run("cold")
    assert len(cold) == 4 * 6 and notes == [] and _prefix_files(cache) == []

    monkeypatch.delenv(LIMIT_ENV)
    first, notes = run("first")
    [file] = _prefix_files(cache)
    assert first == cold and len(notes) == 1 and "written to" in notes[0]
    written = file.read_bytes()

    warm, notes = run("warm")
    assert warm == cold and len(notes) == 1 and "read from" in notes[0]

    # A flipped payload byte (the digest catches it), a truncation, a header without a key.
    middle = len(written) - 100
    damaged = [written[:middle] + bytes([written[middle] ^ 1]) + written[middle + 1:],
               written[:-7], b"zerogap-prefix-kv\n{}\n" + written[-64:], b""]
    for i, content in enumerate(damaged):
        file.write_bytes(content)
        again, notes = run(f"damaged-{i}")
        assert again == cold and len(notes) == 1 and "written to" in notes[0], (i, notes)
        assert file.read_bytes() == written  # rewritten whole, as the first encode wrote it


def test_a_cache_that_cannot_be_written_costs_only_the_encode(tiny_dir, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache root should be")
    monkeypatch.setenv(LIMIT_ENV, "0")
    monkeypatch.setenv("ZEROGAP_CACHE", str(tmp_path / "cache"))
    assert run_main(sample_args(tiny_dir, tmp_path / "reference", "--limit", "2")) == 0
    monkeypatch.delenv(LIMIT_ENV)
    monkeypatch.setenv("ZEROGAP_CACHE", str(blocker))
    assert run_main(sample_args(tiny_dir, tmp_path / "blocked", "--limit", "2")) == 0
    assert stored_samples(tmp_path / "blocked") == stored_samples(tmp_path / "reference")


@pytest.mark.parametrize("value", ["lots", "-1", "1.5"])
def test_a_bad_bound_is_one_line_before_the_model_loads(tmp_path, monkeypatch, capsys, value):
    monkeypatch.setenv(LIMIT_ENV, value)
    run_dir = tmp_path / "run"
    assert run_main(sample_args(tmp_path / "no-model", run_dir)) == 2
    err = capsys.readouterr().err
    assert f"{LIMIT_ENV}={value!r}" in err and err.count("\n") == 1, err
    assert not run_dir.exists()


def _encoded(model, tokenizer, text):
    decoder = _Decoder(model, tokenizer, [text + "a", text + "b"], max_new_tokens=1, stop=(),
                       max_batch=1, prefixes=None)
    tokens = decoder.ids[0][: decoder.prefix_len]
    with torch.inference_mode(), prefix_attention(model):
        return tokens, decoder.prefill.encode([tokens], None, 0)[1][0]


def _store(model, folder, limit=1 << 30, fingerprint="f"):
    return PrefixCache(fingerprint, weights_state(model), folder, limit)


def test_a_hit_gives_the_encoded_bits_and_any_other_key_misses(tiny, tmp_path):
    model, tokenizer = tiny
    tokens, kv = _encoded(model, tokenizer, "Q: 1+1=?\nA: 2\n\nQ: ")
    store = _store(model, tmp_path)
    assert store.load(model, tokens)[0] is None
    assert store.save(model, tokens, kv) is not None
    loaded, _ = store.load(model, tokens)
    assert len(loaded) == len(kv)
    for (k, v), (k2, v2) in zip(kv, loaded, strict=True):
        for a, b in ((k, k2), (v, v2)):
            assert torch.equal(a, b) and a.dtype == b.dtype and a.stride() == b.stride()

    assert store.load(model, tokens[:-1])[0] is None  # other tokens
    assert _store(model, tmp_path, fingerprint="g").load(model, tokens)[0] is None
    saved = torch.get_num_threads()
    torch.set_num_threads(saved + 1)
    try:
        assert store.load(model, tokens)[0] is None  # kernels split work by thread count
    finally:
        torch.set_num_threads(saved)
    assert store.load(model, tokens)[0] is not None


def test_the_cache_holds_only_for_the_weights_it_was_opened_with(make_tiny_llama):
    model = make_tiny_llama()
    store = PrefixCache("f", weights_state(model), "unused", 1 << 20)
    assert store.holds(weights_state(model))
    handle = model.model.layers[0].register_forward_hook(lambda *args: None)
    assert not store.holds(weights_state(model))  # a hook the fingerprint does not see
    handle.remove()
    with torch.no_grad():
        model.model.norm.weight.mul_(2)  # an in-place change bumps the version
    assert not store.holds(weights_state(model))


def test_the_folder_keeps_to_its_bound_dropping_the_least_recently_used(tiny, tmp_path):
    model, tokenizer = tiny
    entries = [_encoded(model, tokenizer, f"Question {i}: what is {i} plus {i}? ")
               for i in range(4)]
    probe = _store(model, tmp_path / "probe")
    size = probe.save(model, *entries[0]).stat().st_size
    store = _store(model, tmp_path / "bounded", limit=int(2.5 * size))

    hour = 3600 * 10**9
    now = time.time_ns()

    def touch(path, age):  # distinct use times, whatever the clock's resolution
        os.utime(path, ns=(now + age * hour,) * 2)

    paths = []
    for i in range(3):
        paths.append(store.save(model, *entries[i]))
        touch(paths[i], i - 3)  # three do not fit: entry 0, the oldest, goes at the third
    hits = [store.load(model, entries[i][0])[0] is not None for i in range(3)]
    assert hits == [False, True, True]
    touch(paths[1], 1)  # entry 1 used after entry 2
    touch(paths[2], -1)
    store.save(model, *entries[3])
    hits = [store.load(model, entries[i][0])[0] is not None for i in range(4)]
    assert hits == [False, True, False, True]
    assert sum(p.stat().st_size for p in (tmp_path / "bounded").iterdir()) <= store.limit
