"""The ``tb-gradlens`` command line (also ``python -m tb_gradlens``)."""

import argparse
import sys

EXIT_OK = 0
EXIT_USAGE = 2


def _demo(args):
    from tb_gradlens import demo

    return demo.run(
        args.logdir, steps=args.steps, port=args.port, serve_after=not args.no_serve
    )


def build_parser():
    parser = argparse.ArgumentParser(
        prog="tb-gradlens",
        description="tb_gradlens: gradient statistics and bfloat16 divergence "
        "for TensorBoard, from the command line.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser(
        "demo",
        help="train the demo MLP (float32 and mixed_bfloat16) and serve TensorBoard",
        description="Train the 784-64-64-10 MLP in float32 and mixed_bfloat16 on "
        "scikit-learn's bundled digits, log with tb_gradlens, then serve "
        "TensorBoard with the GradLens tab on 127.0.0.1.",
        epilog="example: tb-gradlens demo --logdir /tmp/gradlens_demo --port 6006",
    )
    demo.add_argument("--logdir", default="/tmp/gradlens_demo")
    demo.add_argument("--steps", type=int, default=300)
    demo.add_argument("--port", type=int, default=6006)
    demo.add_argument(
        "--no-serve", action="store_true", help="only write the logdir, do not serve"
    )
    demo.set_defaults(func=_demo)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
