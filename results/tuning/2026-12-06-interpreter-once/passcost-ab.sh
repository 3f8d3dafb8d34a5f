# Six passes of the archive tests' former cheap protocol (smoke, both cells, 3 samples, in
# process), timed twice with each version of the interpreter patch: as first committed
# (2b115fb), with one walk per package (f4a270d), and as now (numpy dtypes looked up too):
# python passcost.py inprocess, from the repository's root.
set -e
here=$(dirname "$0")
cp tests/site/interpreter_once.py /tmp/interpreter_once.now.py
for version in 2b115fb f4a270d now; do
    if [ "$version" = now ]; then cp /tmp/interpreter_once.now.py tests/site/interpreter_once.py
    else git show "$version:tests/site/interpreter_once.py" > tests/site/interpreter_once.py; fi
    for i in 1 2; do rm -f /tmp/pc-inprocess.json; echo -n "$version: "; .venv/bin/python "$here/passcost.py" inprocess 2>&1 | tail -1; done
done
