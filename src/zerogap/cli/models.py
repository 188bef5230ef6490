"""``zerogap models path SPEC``: the plain model folder a spec stands for, for other tools.

``embedded`` and ``.gguf`` files are converted once into a transformers folder under the cache
(``$ZEROGAP_CACHE/models``), and a PEFT adapter is merged into its base there; this prints that
folder (a model folder or hub id is printed as given), so that transformers, vLLM or
``lm-eval --model hf --model_args pretrained=...`` load the very weights zerogap samples:

  zerogap models path embedded
  lm-eval run --model hf --model_args pretrained=$(zerogap models path embedded) ...
"""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser("models", help="where a model spec's weights are on disk",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="models_command", required=True, metavar="ACTION")
    path = sub.add_parser("path", help="print the model folder a spec loads (converting "
                                       "embedded or a GGUF file once)")
    path.add_argument("spec", help="'embedded', a .gguf file, a model or adapter folder, or a "
                                   "hub id")
    path.set_defaults(func=_path)


def _path(args) -> int:
    from zerogap.models import model_folder

    print(model_folder(args.spec))
    return 0
