"""rc2's datacenter ids (``runpod/apps/datacenter.py``)."""

from __future__ import annotations

import pytest

from flashpoint.runpodapps.datacenter import CPU3_DATACENTERS, CPU5_DATACENTERS, DataCenter


@pytest.mark.parametrize(
    ("text", "expected"),
    [("US-CA-2", DataCenter.US_CA_2), ("us_ca_2", DataCenter.US_CA_2), (" eur-no-1 ", DataCenter.EUR_NO_1)],
)
def test_from_string(text: str, expected: DataCenter) -> None:
    assert DataCenter.from_string(text) is expected


def test_unknown_datacenter() -> None:
    with pytest.raises(ValueError) as raised:
        DataCenter.from_string("moon-1")
    assert str(raised.value) == (
        "unknown datacenter 'moon-1'. valid datacenters: US-CA-2, US-IL-1, US-KS-2, US-MO-1, US-MO-2, US-NC-2, "
        "US-NE-1, US-WA-1, EU-CZ-1, EU-RO-1, EUR-NO-1"
    )


def test_lists() -> None:
    assert DataCenter.all() == list(DataCenter)
    assert DataCenter.EU_RO_1 == "EU-RO-1"
    assert set(CPU5_DATACENTERS) <= set(CPU3_DATACENTERS)
    assert DataCenter.EUR_NO_1 not in CPU3_DATACENTERS
