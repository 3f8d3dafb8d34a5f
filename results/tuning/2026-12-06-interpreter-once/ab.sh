cd /tmp/dur
T="tests/test_qk_norm_rope.py tests/test_archive.py::test_full_smoke_sweep_completes_through_the_cli tests/test_scripts.py::test_bench_fails_loudly_when_fused_differs_from_split"
git checkout -q tests/conftest.py; rm -rf tests/site
/usr/bin/time -f "base %e s" env TRITON_INTERPRET=1 .venv/bin/python -m pytest -q -p no:cacheprovider -x $T 2>&1 | tail -3
cp -r /work/main/tests/site tests/ && cp /work/main/tests/conftest.py tests/
/usr/bin/time -f "patched %e s" env TRITON_INTERPRET=1 .venv/bin/python -m pytest -q -p no:cacheprovider -x $T 2>&1 | tail -3
