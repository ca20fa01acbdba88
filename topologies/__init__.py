"""Topologies: one module per path type, and the registry ``name -> class``.

Each topology module defines a ``<Name>Params`` pydantic model (its ``name`` is the registry
key) and a class that computes a :class:`topologies.netspec.NetSpec` purely. Importing this
package does not import Mininet or pyroute2: scenario files validate on any machine.
"""

from __future__ import annotations

from topologies.dumbbell import Dumbbell, DumbbellParams
from topologies.geo import Geo, GeoParams
from topologies.many_flows import ManyFlows, ManyFlowsParams
from topologies.multipath import Multipath, MultipathParams
from topologies.parking_lot import ParkingLot, ParkingLotParams
from topologies.wireless import Wireless, WirelessParams

#: registry: the ``topology.name`` of a scenario file -> topology class
TOPOLOGIES = {
    "dumbbell": Dumbbell,
    "many_flows": ManyFlows,
    "parking_lot": ParkingLot,
    "multipath": Multipath,
    "wireless": Wireless,
    "geo": Geo,
}

#: registry of topology parameter models, keyed by the ``name`` a scenario file uses
TOPOLOGY_PARAMS = {name: cls.Params for name, cls in TOPOLOGIES.items()}

__all__ = [
    "TOPOLOGIES",
    "TOPOLOGY_PARAMS",
    "Dumbbell",
    "DumbbellParams",
    "Geo",
    "GeoParams",
    "ManyFlows",
    "ManyFlowsParams",
    "Multipath",
    "MultipathParams",
    "ParkingLot",
    "ParkingLotParams",
    "Wireless",
    "WirelessParams",
]
