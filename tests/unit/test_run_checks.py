"""One run's pre-traffic checks on a kept network (testbed.guest.run._check_and_start): the RTT pings go
on beside the start of the captures and the endpoints, and a check they miss is done once more, idle."""

from __future__ import annotations

from types import SimpleNamespace

from testbed.guest import fidelity
from testbed.guest import run as guest_run


def _report(ok: bool) -> fidelity.FidelityReport:
    return fidelity.FidelityReport([fidelity.Check("base RTT pair 0", ok, 207.2 if not ok else 200.1, 200.0, "")])


def _kept_network_run(monkeypatch, reports: list[fidelity.FidelityReport]) -> tuple[list[str], object]:
    calls: list[str] = []

    def calibrate(state, net):
        calls.append("calibrate")
        return reports.pop(0)

    monkeypatch.setattr(guest_run, "_calibrate", calibrate)
    monkeypatch.setattr(guest_run, "_start_captures", lambda state, net: calls.append("captures"))
    monkeypatch.setattr(guest_run, "_start_servers", lambda state, net: calls.append("servers") or {})
    monkeypatch.setattr(guest_run, "_await_captures", lambda state, net: calls.append("captures open"))
    monkeypatch.setattr(guest_run, "_start_clients", lambda state, net, servers: calls.append("clients") or "ends")
    monkeypatch.setattr(guest_run, "log", lambda *_: None)
    state = SimpleNamespace(lease=SimpleNamespace(reused=True), mark=lambda phase: None)
    report, endpoints = guest_run._check_and_start(state, None)
    assert endpoints == "ends"
    return calls, report


def test_a_missed_rtt_check_is_done_again_once_the_endpoints_are_up(monkeypatch):
    calls, report = _kept_network_run(monkeypatch, [_report(False), _report(True)])
    assert calls.count("calibrate") == 2 and calls[-1] == "calibrate"  # the second after the clients
    assert report.trustworthy


def test_a_passed_rtt_check_is_not_repeated(monkeypatch):
    calls, report = _kept_network_run(monkeypatch, [_report(True)])
    assert calls.count("calibrate") == 1 and report.trustworthy
