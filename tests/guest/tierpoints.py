"""The runs that several files of the guest tier read, made in one session: one guest boot for all of them
(tests/guest/conftest.py: ``tier_session``). Each boot, with its session's setup and report, costs about
30 s under TCG, and runs whose networks are the same use one network (testbed.guest.keeper), as in a
suite. Each test file picks its runs by point id; what it checks is its own.

* test_guest_experiments: every experiment's first quick point compressed to 5 s, one run per loss model,
  the mobile path at 10 % loss;
* test_guest_queues: one run per queue discipline;
* test_guest_module: our module's westwood_paper beside the stock westwood;
* test_guest_dumbbell: the first of the stock westwood's runs below (10 s, 10 Mbit/s, 40 ms);
* test_guest_westwood_tb: 30 s of westwood_ml and westwood_paper at 100 ms; westwood_ml against the stock
  westwood, two seeds each."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from testbed.scenario.load import load_scenario, scenario_from_dict
from testbed.scenario.points import Point
from testbed.scenario.suite import compress

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
EXPERIMENTS = sorted(p for p in SCENARIOS.glob("*.yaml") if p.stem != "default")
#: seconds of traffic per experiment in the smoke (the quick profile's shape, compressed further)
SMOKE_S = 5.0


def _points(data: dict, name: str) -> list[Point]:
    """The points of a scenario given as data, their ids prefixed by ``name`` (unique in the session)."""
    return [replace(p, point_id=f"{name}.{p.point_id}") for p in scenario_from_dict(data, name=name).points]


def _single(data: dict, name: str) -> Point:
    """A one-point scenario as the point ``name`` (its runs' folder)."""
    (point,) = scenario_from_dict(data, name=name).points
    return Point(name, name, {}, point.scenario)


# --- test_guest_experiments ---------------------------------------------------------------------------


def smoke_point(path: Path) -> Point:
    return compress(load_scenario(path, profile="quick").points[0], SMOKE_S, seeds=[1])


#: loss model name -> the link's loss setting
LOSS_MODELS = {
    # netem's own (unseeded) Bernoulli loss; a link's loss_pct is seeded (the BPF channel, as timed_two_state)
    "bernoulli": {"loss": {"model": "bernoulli", "loss_pct": 5, "seeded": False}},
    "gilbert_elliott": {"loss": {"model": "gilbert_elliott", "p_pct": 5, "r_pct": 50, "bad_loss_pct": 100}},
    # short bursts, many of them: over ~3000 packets the realized loss has a spread of ~0.5 points
    "four_state": {
        "loss": {"model": "four_state", "p13_pct": 2, "p31_pct": 60, "p32_pct": 20, "p23_pct": 60, "p14_pct": 1}
    },
    "timed_two_state": {
        "loss": {
            "model": "timed_two_state",
            "good_s": 0.5,
            "bad_s": 0.5,
            "durations": "exponential",
            "good_loss_pct": 0,
            "bad_loss_pct": 5,
        }
    },
}


def loss_point(model: str) -> Point:
    data = {
        "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_pkts": 100, **LOSS_MODELS[model]}},
        "flows": [{"cc": "cubic", "rtt_ms": 20}],
        "duration_s": 12,
        # the timed channel runs twice: the second run gets the first's network, kept (testbed.guest.keeper)
        "seeds": [1, 2] if model == "timed_two_state" else [1],
    }
    return _single(data, f"loss-{model}")


def lossy_point() -> Point:
    """The mobile path at 10 % loss on its radio link: its rate probe once read 0.000 Mbit/s twice there."""
    scenario = load_scenario(SCENARIOS / "mobile-bernoulli.yaml", profile="quick").select(["loss_pct=10"], [])
    (point,) = [p for p in scenario.points if p.params["cc"] == "reno"]
    # a name of its own: the smoke's mobile-bernoulli run is another point
    return compress(replace(point, scenario_name="lossy-mobile-bernoulli"), SMOKE_S, seeds=[1])


def experiment_points() -> list[Point]:
    return [smoke_point(p) for p in EXPERIMENTS] + [loss_point(m) for m in LOSS_MODELS] + [lossy_point()]


# --- test_guest_queues --------------------------------------------------------------------------------

QUEUE_RATE_MBIT, QUEUE_RTT_MS, QUEUE_TRAFFIC_S = 10, 20, 5
#: name -> (the link's queue settings, the flow's ECN)
QUEUES = {
    "fifo-100bdp": ({"queue_bdp": 100}, False),
    "fq_codel": ({"queue": {"discipline": "fq_codel"}}, False),
    "codel-ecn": ({"queue": {"discipline": "codel", "ecn": True}}, True),
    "pie": ({"queue": {"discipline": "pie"}}, False),
    "red": ({"queue_pkts": 100, "queue": {"discipline": "red"}}, False),
    "cake": ({"queue": {"discipline": "cake", "rtt_ms": 20}}, False),
}


def queue_point(name: str) -> Point:
    link, ecn = QUEUES[name]
    flows = [{"cc": "reno", "rtt_ms": QUEUE_RTT_MS, "ecn": ecn}]
    if not ecn:  # an ICMP echo is not ECN-capable: CoDel drops it where it marks the flow (1 drop, seen in CI)
        flows.append({"kind": "ping", "rtt_ms": QUEUE_RTT_MS, "interval_ms": 100})
    data = {
        "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": QUEUE_RATE_MBIT, **link}},
        "flows": flows,
        "duration_s": QUEUE_TRAFFIC_S,
    }
    return _single(data, f"queue-{name}")


# --- test_guest_module and test_guest_westwood_tb -------------------------------------------------------

MODULE_POINT = "guest-module"
WESTWOOD_TB = "westwood-tb"
ML_VS_STOCK = "ml-vs-stock"
ML_VS_STOCK_SEEDS = [1, 2]  # two each: four runs of 10 s
ML_VS_STOCK_RATE_MBIT, ML_VS_STOCK_TRAFFIC_S = 10, 10


def module_point() -> Point:
    data = {
        "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_bdp": 1}},
        "flows": [{"cc": "westwood", "rtt_ms": 40}, {"cc": "westwood_paper", "rtt_ms": 40}],
        "duration_s": 8,
    }
    return _single(data, MODULE_POINT)


def westwood_tb_points() -> list[Point]:
    long = {
        "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_bdp": 1}},
        "flows": [{"cc": ["westwood_ml", "westwood_paper"], "rtt_ms": 100}],
        "duration_s": 30,
    }
    against_stock = {
        # no random loss: Debian 12's netem cannot seed it, and at 0.5 % the seeds' spread
        # (5.5 to 8.2 Mbit/s, measured) would make any two algorithms "agree"
        "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": ML_VS_STOCK_RATE_MBIT, "queue_bdp": 1}},
        "flows": [{"cc": ["westwood", "westwood_ml"], "rtt_ms": 40}],
        "duration_s": ML_VS_STOCK_TRAFFIC_S,
        "seeds": ML_VS_STOCK_SEEDS,
    }
    return _points(long, WESTWOOD_TB) + _points(against_stock, ML_VS_STOCK)


def all_points() -> list[Point]:
    return experiment_points() + [queue_point(n) for n in QUEUES] + [module_point()] + westwood_tb_points()


def runs_of(session, prefix: str) -> list[Path]:
    """The session's run folders whose point id is ``prefix`` or starts with ``prefix.``."""
    return [r for r in session.runs if r.parent.name == prefix or r.parent.name.startswith(f"{prefix}.")]
