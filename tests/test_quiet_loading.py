"""Loading a model shows nothing of transformers' own (its unlabelled weight-loading bar would
break the command's one progress line), and leaves transformers' setting as it found it."""

import sys
from pathlib import Path

from transformers.utils import logging as hf_logging

sys.path.insert(0, str(Path(__file__).parent))
import helpers  # noqa: E402
from zerogap.models import load_model  # noqa: E402


def test_a_model_loads_without_third_party_output(tmp_path, capfd):
    folder = helpers.save_tiny(tmp_path / "tiny")
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.enable_progress_bar()  # as in a fresh process (an earlier --quiet turns it off)
    try:
        capfd.readouterr()
        loaded = load_model(str(folder))
        assert loaded.model is not None
        out, err = capfd.readouterr()
        assert (out, err) == ("", "")
        assert hf_logging.is_progress_bar_enabled()  # other code keeps its bars
    finally:
        if not was:
            hf_logging.disable_progress_bar()
