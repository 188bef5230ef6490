"""Model loading: the remembered fingerprint is always the loaded weights' own."""

import helpers
from zerogap.models import load_model, weight_fingerprint


def test_remembered_fingerprint_follows_the_weights_and_the_dtype(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEROGAP_CACHE", str(tmp_path / "cache"))
    folder = helpers.save_tiny(tmp_path / "model")
    first = load_model(str(folder), device="cpu")
    assert first.fingerprint == weight_fingerprint(first.model)
    assert any((tmp_path / "cache" / "memo").iterdir())  # remembered ...
    again = load_model(str(folder), device="cpu")
    assert again.fingerprint == first.fingerprint  # ... and read back
    bf16 = load_model(str(folder), device="cpu", dtype="bfloat16")
    assert bf16.fingerprint == weight_fingerprint(bf16.model) != first.fingerprint
    # Other weights written into the same folder: the memo no longer applies.
    helpers.tiny_model(seed=1).save_pretrained(folder)
    changed = load_model(str(folder), device="cpu")
    assert changed.fingerprint == weight_fingerprint(changed.model) != first.fingerprint


def test_an_unwritable_cache_only_costs_the_recomputation(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("ZEROGAP_CACHE", str(blocker))
    folder = helpers.save_tiny(tmp_path / "model")
    loaded = load_model(str(folder), device="cpu")
    assert loaded.fingerprint == weight_fingerprint(loaded.model)
