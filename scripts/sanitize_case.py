"""The inputs that used to read or write out of bounds, for ``compute-sanitizer``.

    compute-sanitizer --tool memcheck python scripts/sanitize_case.py

Cases, each for the fused and the split route:

* ``positions``: positions negative, past the table and far past it (int64), out of
  place, once eagerly and once captured in a CUDA graph and replayed: the rotary channels
  of those tokens must be NaN, everything else what a call with good positions gives, and
  the two routes identical bit for bit;
* ``head-stride``: q a head-strided view whose last head starts 2 * (2**30 + 256) > 2**31
  elements into its allocation (the offset that wrapped in int32), written out of place
  into an equally strided output: the result must equal that of a contiguous copy.
  Needs about 8.6 GB of device memory.

Prints one PASS/FAIL line per case and exits 1 on any FAIL; memcheck's own verdict is its
``ERROR SUMMARY`` line. ``--small`` shrinks the stride (no 2**31) so that the logic runs
anywhere, under Triton's interpreter on the CPU too.
"""

import argparse
import os
import sys

import torch

MAX_POS = 64
BAD_POSITIONS = [-1, MAX_POS, 1000, 2**40, -(2**62)]


def positions_case(route, device: torch.device, graph: bool) -> str | None:
    """None if the out-of-range positions behave as documented, else what went wrong."""
    from qkbench.accuracy import bits
    from qkbench.case import Case, Geometry, make_inputs
    from qkbench.kernels import qk_norm_rope_split

    tokens = 2 * len(BAD_POSITIONS) + 1
    geometry = Geometry("g", 4, 2, 128, rotary_dim=64, inplace=False)
    inputs = make_inputs(Case(geometry, tokens, max_position=MAX_POS), 0, device)
    positions = inputs.positions.clone()
    positions[1::2] = torch.tensor(BAD_POSITIONS, device=device)
    q_out, k_out = torch.empty_like(inputs.q), torch.empty_like(inputs.k)

    def launch():
        inputs.call(route, inplace=False, q_out=q_out, k_out=k_out, positions=positions)

    launch()  # compiled (and, for the graph, warmed) here
    if graph:
        q_out.fill_(0)
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            launch()
        captured.replay()
    if device.type == "cuda":
        torch.cuda.synchronize()
    split = inputs.call(qk_norm_rope_split, inplace=False, positions=positions)
    clean = inputs.call(route, inplace=False)
    bad = torch.zeros(tokens, dtype=torch.bool, device=device)
    bad[1::2] = True
    r = geometry.rotary
    for name, out, ref, good in (("q", q_out, split[0], clean[0]), ("k", k_out, split[1],
                                                                     clean[1])):
        if not torch.equal(bits(out), bits(ref)):
            return f"{name}: differs from the split route in its bits"
        if not out[bad][..., :r].isnan().all():
            return f"{name}: a rotary channel of an out-of-range position is not NaN"
        if not torch.equal(bits(out[bad][..., r:]), bits(good[bad][..., r:])):
            return f"{name}: the pass-through channels of an out-of-range position changed"
        if not torch.equal(bits(out[~bad]), bits(good[~bad])):
            return f"{name}: a token with a good position changed"
    return None


def head_strided(tokens: int, heads: int, head_dim: int, stride_h: int,
                 device: torch.device) -> torch.Tensor:
    """A bf16 ``[T, H, D]`` view whose heads lie ``stride_h`` elements apart."""
    span = (heads - 1) * stride_h + tokens * head_dim
    base = torch.empty(span, dtype=torch.bfloat16, device=device)  # only the view is read
    return base.as_strided((tokens, heads, head_dim), (head_dim, stride_h, 1))


def head_stride_case(route, device: torch.device, stride_h: int) -> str | None:
    """None if a far head-strided q (and q_out) gives a contiguous copy's result."""
    from qkbench.accuracy import bits
    from qkbench.case import Case, Geometry, make_inputs

    geometry = Geometry("g", 3, 1, 128, inplace=False)
    inputs = make_inputs(Case(geometry, 2), 0, device)
    q = head_strided(2, 3, 128, stride_h, device)
    q.copy_(inputs.q)
    q_out = head_strided(2, 3, 128, stride_h, device)
    expected = inputs.call(route, inplace=False)
    got = inputs.call(route, q=q, inplace=False, q_out=q_out)
    if device.type == "cuda":
        torch.cuda.synchronize()
    ok = torch.equal(bits(got[0].contiguous()), bits(expected[0]))
    del q, q_out
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return None if ok else "q differs from the contiguous copy's result"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true",
                        help="a head stride below 2**31 (to run the logic anywhere)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # read when the kernels are imported
    from qkbench.kernels import qk_norm_rope, qk_norm_rope_split

    stride_h = 1024 if args.small else 2**30 + 256
    cases = []
    for route in (qk_norm_rope, qk_norm_rope_split):
        name = route.__name__
        cases.append((f"positions eager {name}", lambda r=route: positions_case(r, device,
                                                                               False)))
        if device.type == "cuda":
            cases.append((f"positions graph {name}",
                          lambda r=route: positions_case(r, device, True)))
        cases.append((f"head-stride {stride_h} {name}",
                      lambda r=route: head_stride_case(r, device, stride_h)))
    failed = 0
    for name, case in cases:
        try:
            problem = case()
        except Exception as e:  # a crash is a failure of the case, and the others still run
            problem = f"{type(e).__name__}: {e}"
        failed += problem is not None
        print(f"{'PASS' if problem is None else 'FAIL'} {name}"
              + ("" if problem is None else f": {problem}"), flush=True)
    print(f"sanitize cases: {'PASS' if not failed else f'FAIL ({failed})'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
