"""The snapshot extensions of a recorded reference refuse anything but a `Reference`."""

from __future__ import annotations

import pytest

from pytest_fwdorder.checks.reference_files import (
    ReferenceSnapshotExtension,
    ReferenceTextSnapshotExtension,
)


@pytest.mark.parametrize("extension", [ReferenceSnapshotExtension, ReferenceTextSnapshotExtension])
def test_an_extension_given_no_reference_names_itself_the_value_and_the_fix(
    extension: type[ReferenceSnapshotExtension | ReferenceTextSnapshotExtension],
) -> None:
    with pytest.raises(
        TypeError,
        match=rf"^{extension.__name__} stores a Reference, got 'dict': pass what "
        "record_reference returns$",
    ):
        extension().serialize({"weight": 1})
