"""The README and the notes name the archives their figures come from: each must exist."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# An archive's folder by card or for tuning runs, in backticks; `<date>` placeholders name
# runs still to come, so they are not references.
ARCHIVE = re.compile(r"`(results/(?:h100|h200|tuning)/[^`\s<]+)`")


def missing_archives(text: str, root: Path) -> list[str]:
    """The archive paths ``text`` names that match nothing under ``root``: a path may name
    a file, a folder, the stem of a run's files (``l2policy-x`` for ``l2policy-x.json`` and
    ``.txt``) or a range of files (``probe-a..d.json``)."""
    missing = []
    for match in ARCHIVE.finditer(text):
        path = match.group(1).rstrip(".,;:")
        pattern = re.sub(r"(\w)\.\.(\w)", r"[\1-\2]", path)
        # The path as named first: one that ends in a wildcard takes no second.
        if not any(root.glob(pattern)) and not any(root.glob(pattern + "*")):
            missing.append(path)
    return missing


def test_every_archive_the_docs_name_exists():
    missing = {doc.name: found for doc in DOCS
               if (found := missing_archives(doc.read_text(), ROOT))}
    assert not missing


def test_an_archive_named_but_not_committed_is_found_missing(tmp_path):
    (tmp_path / "results/h200/2026-12-03-v32").mkdir(parents=True)
    (tmp_path / "results/h200/2026-12-03-v32/prefill.json.gz").touch()
    (tmp_path / "results/h200/2026-12-03-v32/probe-a.json").touch()
    (tmp_path / "results/h200/2026-12-03-v32/probe-b.json").touch()
    text = ("`results/h200/2026-12-03-v32/prefill.json.gz`, `results/h200/2026-12-03-v32/`, "
            "`results/h200/2026-12-03-v32/probe-a..b.json`, `results/h200/<date>-v312/`, "
            "`results/h200/2026-12-03-v32/prefill-cold.json.gz`, "
            "`results/h100/2026-12-03-v32/prefill.json.gz`.")
    assert missing_archives(text, tmp_path) == [
        "results/h200/2026-12-03-v32/prefill-cold.json.gz",
        "results/h100/2026-12-03-v32/prefill.json.gz",
    ]
