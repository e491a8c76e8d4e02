"""``tb-gradlens demo``: train the demo MLP and serve TensorBoard (``tb_gradlens.demo``)."""

import argparse

from tb_gradlens.cli import common


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """``tb-gradlens demo``'s arguments, help and examples."""
    parser = subparsers.add_parser(
        "demo",
        help="train the demo MLP (float32 and mixed_bfloat16) and serve TensorBoard",
        description="Train the 784-64-64-10 MLP in float32 and mixed_bfloat16 on "
        "scikit-learn's bundled digits, log with tb_gradlens, then serve "
        "TensorBoard with the GradLens tab on 127.0.0.1.",
        epilog="examples:\n"
        "  tb-gradlens demo\n"
        "  tb-gradlens demo --logdir /tmp/gradlens_demo --port 6006\n"
        "  tb-gradlens demo --steps 50 --no-serve\n\n"
        "exit status: 0 trained (and served until Ctrl-C), 2 usage, 4 internal error, 130 interrupted",
        formatter_class=common.FORMATTER,
    )
    parser.add_argument("--logdir", default="/tmp/gradlens_demo")
    parser.add_argument("--steps", type=common.plain_int, default=300)
    parser.add_argument("--port", type=common.plain_int, default=6006)
    parser.add_argument(
        "--no-serve", action="store_true", help="only write the logdir, do not serve"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Train both runs (and serve unless ``--no-serve``); the demo's exit status."""
    import os

    # The demo's own process: TensorFlow's start-up notes and the XLA service lines of its XLA comparison
    # are INFO logs (level 0); warnings (level 1) still print.  A level the user set is kept.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    from tb_gradlens import demo

    return demo.run(
        args.logdir, steps=args.steps, port=args.port, serve_after=not args.no_serve
    )
