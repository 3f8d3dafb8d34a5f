"""Print the host cost of one eager call of the op, beside a bare launch of its kernel.

    python scripts/host_cost.py [--calls 2000] [--tokens 1] [--json OUT.json]

On a CUDA device by default; without one the kernels run in Triton's interpreter and the
figures only show that the code runs.
"""

import argparse
import json
import os

import torch


def table(result: dict) -> str:
    lines = [f"host cost per call, {result['geometry']} T={result['tokens']} on "
             f"{result['device']}, {result['calls']} calls synchronised at the end"]
    for name, us in result["us_per_call"].items():
        lines.append(f"  {name:24s} " + ("      -" if us is None else f"{us:8.2f} us"))
    return "\n".join(lines)


def positive(text: str) -> int:
    """A whole number >= 1 (argparse names the option in its error)."""
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=positive, default=None,
                        help="calls per row (default 2000 on CUDA, 2 on the CPU)")
    parser.add_argument("--tokens", type=positive, default=1)
    parser.add_argument("--json", default=None, help="also write the result here")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        # Read when the kernels are first imported, below.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from qkbench import hostcost

    calls = args.calls if args.calls is not None else 2000 if device.type == "cuda" else 2
    result = hostcost.measure(device, calls, args.tokens)
    print(table(result))
    if args.json:
        try:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
        except OSError as e:
            parser.exit(1, f"error: {args.json}: cannot be written ({e.strerror})\n")


if __name__ == "__main__":
    main()
