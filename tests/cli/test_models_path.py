"""``zerogap models path``: the folder other tools load to get the weights zerogap samples."""

from pathlib import Path

from zerogap.cli import main


def test_the_embedded_model_is_a_loadable_transformers_folder(capsys):
    from transformers import AutoConfig

    assert main(["models", "path", "embedded"]) == 0
    folder = Path(capsys.readouterr().out.strip())
    assert (folder / "model.safetensors").is_file()
    assert AutoConfig.from_pretrained(folder).num_hidden_layers == 30  # SmolLM2-135M


def test_a_missing_path_is_one_line_with_exit_code_2(tmp_path, capsys):
    assert main(["models", "path", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"zerogap models: error: model path {tmp_path / 'nope'} does not exist"
