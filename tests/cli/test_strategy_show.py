"""``zerogap strategy show`` states what each strategy declares: what it needs prepared, the
backend capabilities it requires, and the settings a study takes from its task."""

import pytest

from zerogap import cli


@pytest.mark.parametrize("name, needs, capabilities", [
    ("identity", "nothing prepared", "none"),
    ("railcap", "greedy decodes", "logits"),
    ("lne-blocking", "greedy decodes, greedy entropies", "logits, entropies"),
    ("shortcut", "a located neuron list and the model it patches from", "patching"),
    ("ted", "greedy decodes", "none"),
])
def test_show_states_what_the_strategy_needs(name, needs, capabilities, capsys):
    assert cli.main(["strategy", "show", name]) == 0
    second = capsys.readouterr().out.splitlines()[1]
    assert second.endswith(f"needs {needs}; backend capabilities: {capabilities}"), second


def test_show_names_the_settings_a_study_takes_from_the_task(capsys):
    assert cli.main(["strategy", "show", "lne-blocking"]) == 0
    assert "# a study sets from its task where not given: t_task" in capsys.readouterr().out
    assert cli.main(["strategy", "show", "railcap"]) == 0
    assert "sets from its task" not in capsys.readouterr().out


def test_strategy_list_tells_every_strategy_apart(capsys):
    assert cli.main(["strategy", "list"]) == 0
    described = [line.split(None, 1)[1] for line in capsys.readouterr().out.splitlines()]
    assert len(set(described)) == len(described)


def test_a_strategy_without_settings_says_so(capsys):
    assert cli.main(["strategy", "show", "all-zero"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("# settings: none") and "KEY=VALUE" not in out
