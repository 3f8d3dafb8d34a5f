"""The launch state the arms are timed in (``timing.launch_state``): the floor timed after
each comparison's arms with nothing between, and with "pdl" an empty PDL launch right
before every timing of arms or of the copy reference, after every allocation of theirs."""

import pytest

from qkbench import limits, report
from qkbench.backends import Timed
from qkbench.protocol import parse
from qkbench.summary import current

from synthetic import SyntheticBackend, synthetic_sweep, tiny_protocol

FLAG = "larger than the width"


class Recording(SyntheticBackend):
    """The synthetic clock, logging what is prepared and timed, and each prime launch."""

    def __init__(self, **clock):
        super().__init__(**clock)
        self.log: list[str] = []

    def prepare(self, launches, inner_reps, label):
        self.log.append(f"prepare {label}")
        return super().prepare(launches, inner_reps, label)

    def run(self, arms, sequence, sync_after):
        self.log.append("run " + " ".join(label for label, _ in arms))
        return super().run(arms, sequence, sync_after)

    def primed(self) -> None:
        """An empty kernel was launched with PDL (the first time as its primer is made)."""
        self.log.append("prime")


class LaunchStateClock(Recording):
    """The synthetic clock with the H200's launch state in it: every sample 10 % faster in
    the fast state. A PDL launch sets it: a primer, or the second candidate (fused-pdl) of
    a cell, whose comparison then runs fast throughout. The allocations before a
    comparison's arms are prepared reset it, as a cell's verification does."""

    def __init__(self, **clock):
        super().__init__(**clock)
        self.fast = False

    def prepare(self, launches, inner_reps, label):
        if label in ("A", "B", "A'"):
            self.fast = False
        return super().prepare(launches, inner_reps, label)

    def run(self, arms, sequence, sync_after):
        if len(arms) == 3 and self.comparisons % 2 == 1:
            self.fast = True
        timed = super().run(arms, sequence, sync_after)
        if self.fast:
            timed = Timed([s * 0.9 for s in timed.seconds], timed.telemetry)
        return timed

    def primed(self) -> None:
        super().primed()
        self.fast = True


def tell_on_primers(monkeypatch, backend: Recording) -> None:
    """Each launch of an empty kernel made with PDL calls ``backend.primed``."""
    made = limits.empty_launch

    def empty_launch(device, programs=1, pdl=False):
        launch = made(device, programs)
        if not pdl:
            return launch

        def told():
            backend.primed()
            launch()
        return told

    monkeypatch.setattr(limits, "empty_launch", empty_launch)


@pytest.fixture
def recorded(monkeypatch):
    """A backend whose log also shows each launch of an empty kernel made with PDL (its
    first when the primer is made)."""
    backend = Recording()
    tell_on_primers(monkeypatch, backend)
    return backend


def sweep_log(backend: Recording, tmp_path, launch_state: str) -> list[str]:
    protocol = parse(tiny_protocol(tokens=(1,), passes=6, samples=4, warmup=1))
    synthetic_sweep(protocol.with_overrides(launch_state=launch_state), tmp_path / "run.json",
                    backend)
    return [e for e in backend.log if e != "run limit"]  # the pass's device limits


ARMS = ("prepare A", "prepare B", "prepare A'")


def first_case(log: list[str]) -> tuple[str, list[str]]:
    """The entry before the first case's arms are prepared, and the case's log from its
    arms' preparation to its copy's timing."""
    start = next(i for i, e in enumerate(log) if e in ARMS)
    return log[start - 1], log[start:log.index("run copy", start) + 1]


def timed(arms: list[str]) -> str:
    """The run entry of the arms prepared as ``arms`` (in their sampling order)."""
    return "run " + " ".join(a.removeprefix("prepare ") for a in arms)


def test_pdl_primes_right_before_the_arms_and_the_copy_are_timed(recorded, tmp_path):
    log = sweep_log(recorded, tmp_path, "pdl")
    before, one = first_case(log)
    arms = one[:3]
    assert sorted(arms) == sorted(ARMS)
    assert before == "prime"  # the comparison's primer, made before its arms
    # The copy's primer is made (and so launched once) after the comparison's floor.
    assert one[3:] == ["prepare floor", "prime", timed(arms), "run floor", "prime",
                       "prepare copy", "prime", "run copy"]
    # Each pass primes its comparison, its copy and its device limits, each primer made too.
    assert log.count("prime") == 6 * 3 * 2


def test_as_found_launches_no_primer(recorded, tmp_path):
    log = sweep_log(recorded, tmp_path, "as-found")
    assert "prime" not in log
    _, one = first_case(log)
    arms = one[:3]
    assert one[3:] == ["prepare floor", timed(arms), "run floor", "prepare copy", "run copy"]


def test_the_sweep_command_takes_the_launch_state_and_the_archive_records_it(recorded,
                                                                             tmp_path):
    from typer.testing import CliRunner

    from qkbench import archive as archives
    from qkbench.cli import app

    protocol = tmp_path / "tiny.toml"
    protocol.write_text(tiny_protocol(tokens=(1,), samples=2, warmup=0,
                                      drop_threshold=0.99))
    out = tmp_path / "run.json"
    result = CliRunner().invoke(app, ["sweep", "--protocol", str(protocol), "--device", "cpu",
                                      "--launch-state", "pdl", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert archives.read(out)["protocol"]["resolved"]["timing"]["launch_state"] == "pdl"
    assert "prime" in recorded.log  # the worker ran in this process (isolation inprocess)


def test_only_a_default_launch_state_may_go_unrecorded(recorded, tmp_path):
    from qkbench import archive as archives
    from qkbench.audit import audit

    from helpers import reseal

    runs = {}
    for state in ("as-found", "pdl"):
        text = tiny_protocol(tokens=(1,), launch_state=state)  # set by the protocol's text
        synthetic_sweep(text, tmp_path / f"{state}.json", recorded)
        runs[state] = archives.read(tmp_path / f"{state}.json")
        del runs[state]["protocol"]["resolved"]["timing"]["launch_state"]
        reseal(runs[state])
    # An archive from before the setting ran as its default does; one whose text asks for
    # "pdl" must record it.
    assert audit(runs["as-found"]) == []
    assert audit(runs["pdl"]) == ["protocol: the resolved settings do not follow from its "
                                  "text and the recorded routes and timing"]


def test_the_report_says_which_launch_state_the_arms_ran_in(recorded, tmp_path):
    from qkbench import report

    protocol = parse(tiny_protocol(tokens=(1,))).with_overrides(launch_state="pdl")
    run = synthetic_sweep(protocol, tmp_path / "run.json", recorded)
    assert any(", launch state pdl;" in line for line in report.header_lines(run))


def test_pdl_primes_the_passs_launch_floor_after_its_copy_bandwidth(recorded, tmp_path):
    protocol = parse(tiny_protocol(tokens=(1,), passes=6, samples=4, warmup=1))
    synthetic_sweep(protocol.with_overrides(launch_state="pdl"), tmp_path / "run.json",
                    recorded)
    # A pass ends with its device limits: the copy's bandwidth, then the launch floor.
    # (Its primer, made before them, launches once as it is made.)
    assert recorded.log[-6:] == ["prime", "prepare copy", "run copy", "prime",
                                 "prepare floor", "run floor"]


@pytest.mark.parametrize(("launch_state", "flagged"), [("as-found", True), ("pdl", False)])
def test_a_pdl_candidate_moves_its_baseline_only_when_the_state_is_left_as_found(
        monkeypatch, tmp_path, launch_state, flagged):
    """Identical code in every arm, on a clock with the launch state in it: no verdict
    either way; as found the report flags the baseline 10 % faster beside fused-pdl, and
    held by the primer it reads level."""
    clock = LaunchStateClock()
    tell_on_primers(monkeypatch, clock)
    text = tiny_protocol("state", routes=("split", "fused", "fused-pdl"))
    run = synthetic_sweep(parse(text).with_overrides(launch_state=launch_state),
                          tmp_path / "run.json", clock)
    verdicts = {c["effect"]["verdict"] for comp in current(run)["comparisons"]
                for c in comp["cases"]}
    assert not verdicts & {"faster", "slower"}, verdicts
    (line,) = [line for line in report.neighbour_lines(run) if "T <= 64" in line]
    change = float(line.split("T <= 64: ")[1].split("%")[0])
    assert change == pytest.approx(-10.0 if flagged else 0.0, abs=0.05)
    assert (FLAG in line) is flagged
