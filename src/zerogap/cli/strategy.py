"""``zerogap strategy``: list the registered strategies and show one's settings."""

from __future__ import annotations

import argparse

from zerogap.cli.flags import add_markdown

EXAMPLES = """examples:
  zerogap strategy list
  zerogap strategy list --markdown
  zerogap strategy show railcap
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "strategy", help="list strategies, show their settings",
        description="Inspect the registered mitigation strategies and their --set settings.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="names of the registered strategies")
    add_markdown(listing)
    listing.set_defaults(func=_list)
    show = actions.add_parser("show", help="a strategy's settings, defaults and readout")
    show.add_argument("name", help="strategy name (see 'zerogap strategy list')")
    show.set_defaults(func=_show)


def _list(args) -> int:
    from zerogap.strategies import get_strategy, strategy_names, strategy_summary

    if args.markdown:
        from zerogap.config import markdown_table

        entries = []
        for name in strategy_names():
            config = get_strategy(name).config  # with the name's preset (railcap-ban: ban)
            entries.append((name, type(config), config.to_dict()))
        print(markdown_table("strategy", entries), end="")
        return 0
    for name in strategy_names():
        print(f"{name:14} {strategy_summary(name)}")
    return 0


def _show(args) -> int:
    import dataclasses

    from zerogap.config import describe
    from zerogap.strategies import get_strategy, strategy_summary

    strategy = get_strategy(args.name)
    needs = [what for what, flag in (
        ("greedy decodes", strategy.needs_greedy),
        ("greedy entropies", strategy.needs_entropy),
        ("a located neuron list and the model it patches from", strategy.needs_neurons),
    ) if flag]
    print(f"# strategy {args.name}: {strategy_summary(args.name)}")
    print(f"# readout {strategy.readout}; needs {', '.join(needs) or 'nothing prepared'}; "
          f"backend capabilities: {', '.join(strategy.requires) or 'none'}")
    if strategy.task_setting_records:
        print(f"# a study sets from its task where not given: "
              f"{', '.join(strategy.task_setting_records)}")
    defaults = dataclasses.asdict(strategy.config)  # every field (a record may omit defaults)
    if not defaults:
        print("# settings: none")
        return 0
    print(f"# settings ({args.name}:KEY=VALUE or --set KEY=VALUE), with this strategy's "
          "defaults:")
    for line, key in zip(describe(type(strategy.config)), defaults, strict=True):
        print(f"{line}  [{args.name}: {defaults[key]!r}]")
    return 0

