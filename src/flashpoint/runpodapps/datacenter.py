"""Datacenter ids for App resources, as rc2 has them (mirrors ``runpod/apps/datacenter.py`` of ``runpod==2.0.0rc2``).

flashpoint has no datacenters of Runpod's: a resource's ``datacenter=`` is checked and normalized as rc2 does, so a
typo fails at decoration time, and is otherwise carried along for what it may mean to the bridge.

Standard library only.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["CPU3_DATACENTERS", "CPU5_DATACENTERS", "DataCenter"]


class DataCenter(str, Enum):
    # north america
    US_CA_2 = "US-CA-2"
    US_IL_1 = "US-IL-1"
    US_KS_2 = "US-KS-2"
    US_MO_1 = "US-MO-1"
    US_MO_2 = "US-MO-2"
    US_NC_2 = "US-NC-2"
    US_NE_1 = "US-NE-1"
    US_WA_1 = "US-WA-1"

    # europe
    EU_CZ_1 = "EU-CZ-1"
    EU_RO_1 = "EU-RO-1"
    EUR_NO_1 = "EUR-NO-1"

    @classmethod
    def from_string(cls, value: str) -> DataCenter:
        """parse a datacenter id, accepting lowercase and underscores."""
        normalized = value.strip().upper().replace("_", "-")
        try:
            return cls(normalized)
        except ValueError:
            valid = ", ".join(dc.value for dc in cls)
            raise ValueError(f"unknown datacenter '{value}'. valid datacenters: {valid}") from None

    @classmethod
    def all(cls) -> list[DataCenter]:
        return list(cls)


#: datacenters with high cpu serverless stock (rc2's lists; cpu5c/cpu5g are only stocked in EU-RO-1)
CPU3_DATACENTERS: list[DataCenter] = [
    DataCenter.EU_CZ_1,
    DataCenter.EU_RO_1,
    DataCenter.US_CA_2,
    DataCenter.US_IL_1,
    DataCenter.US_KS_2,
    DataCenter.US_MO_1,
    DataCenter.US_MO_2,
    DataCenter.US_NC_2,
    DataCenter.US_NE_1,
    DataCenter.US_WA_1,
]
CPU5_DATACENTERS: list[DataCenter] = [DataCenter.EU_RO_1]
