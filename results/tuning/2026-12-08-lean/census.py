"""Per ``scripts/kernel_ir.py`` case (sm_90, no device): the SASS instructions of the
kernel (every path's code, not the instructions one program executes), those of the ALU
pipe's families (integer, bit, select, compare, move), of the conversion unit (F2F, MUFU)
and of the FMA pipe (FMUL, FADD, FFMA, IMAD), and the selects and F2F alone.

    python results/tuning/2026-12-08-lean/census.py > OUT.txt   # from the repository root
"""

import collections
import re
import sys

sys.path.insert(0, "scripts")
import kernel_ir

ALU = ("SHF", "PRMT", "SEL", "LOP3", "ISETP", "IADD3", "LEA", "SGXT", "FSEL", "FSETP", "MOV",
       "CS2R", "FMNMX")
INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P[0-9T] )?([A-Z0-9_]+)")


def census(sass: str) -> dict[str, int]:
    ops = collections.Counter(m.group(1) for m in map(INSTRUCTION.match, sass.splitlines()) if m)
    return {"instructions": sum(ops.values()), "ALU": sum(ops[k] for k in ALU),
            "XU": ops["F2F"] + ops["MUFU"],
            "FMA": ops["FMUL"] + ops["FADD"] + ops["FFMA"] + ops["IMAD"],
            "SEL": ops["SEL"], "F2F": ops["F2F"]}


def main() -> None:
    print(kernel_ir.table([
        (label, census(kernel_ir.cuobjdump(kernel_ir.compile_for_sm90(k, a, w), "-sass")))
        for label, k, a, w in kernel_ir.CASES if not label.startswith("rows copy")]))


if __name__ == "__main__":
    main()
