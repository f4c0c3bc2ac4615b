"""Instances as the tests make them: `make` builds one in a line, `instances()` draws any the
wire can carry (hypothesis). Shared by the core, store, reads, peers and codec tests."""

from __future__ import annotations

from hypothesis import strategies as st

from registry.codec.wire import MAX_LEASE_SECS
from registry.core.model import (
    AMAZON_CLASS,
    ActionType,
    DataCenterInfo,
    InstanceInfo,
    InstanceStatus,
    PortInfo,
)

T0 = 1_735_689_000_000  # the tests' "now": 2024-12-31 23:50 UTC, in epoch milliseconds


def make(
    iid: str = "i-1",
    app: str = "ORDERS",
    status: InstanceStatus = InstanceStatus.UP,
    dirty: int = T0,
    **fields: object,
) -> InstanceInfo:
    """An instance of `app`, last dirty (and updated) at `dirty`; `fields` set the rest."""
    return InstanceInfo(
        instance_id=iid,
        app=app,
        host_name=f"{iid}.internal",
        ip_addr="10.0.0.5",
        data_center_info=DataCenterInfo(name="MyOwn"),
        status=status,
        last_dirty_ms=dirty,
        last_updated_ms=dirty,
        **fields,  # type: ignore[arg-type]
    )


# Text an instance may carry: anything XML 1.0 can hold.
safe_text = st.text(
    st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\ufffe\uffff"),
    max_size=30,
)
# What ids may be: visible ASCII without '/', and not '.' or '..' (wire.check_path_segment)
ids = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="/"), min_size=1
).filter(lambda s: s not in (".", ".."))
optional = st.none() | safe_text.filter(bool)
ports = st.builds(PortInfo, st.integers(0, 65535), st.booleans())
# "@class" is Java's type marker in a metadata map, never a key (readers drop it).
keys = safe_text.filter(lambda key: key != "" and key != "@class")


@st.composite
def instances(draw: st.DrawFn) -> InstanceInfo:
    """Any instance the codecs and the store must carry whole."""
    amazon = draw(st.booleans())
    data_center = (
        DataCenterInfo(
            name="Amazon",
            class_name=AMAZON_CLASS,
            metadata={
                "instance-id": draw(ids),
                **draw(st.dictionaries(keys, safe_text, max_size=3)),
            },
        )
        if amazon
        else DataCenterInfo(name=draw(st.sampled_from(["MyOwn", "Netflix"])))
    )
    return InstanceInfo(
        instance_id=draw(ids),
        app=draw(ids).upper(),
        host_name=draw(ids),
        ip_addr=draw(ids),
        data_center_info=data_center,
        status=draw(st.sampled_from(list(InstanceStatus))),
        overridden_status=draw(st.sampled_from(list(InstanceStatus))),
        port=draw(ports),
        secure_port=draw(ports),
        renewal_interval_secs=draw(st.integers(1, MAX_LEASE_SECS)),
        duration_secs=draw(st.integers(1, MAX_LEASE_SECS)),
        metadata=draw(st.dictionaries(keys, safe_text, max_size=4)),
        sid=draw(st.sampled_from(["na", "sid-1"])),
        country_id=draw(st.integers(0, 300)),
        app_group_name=draw(optional.map(lambda s: s.upper() if s else None)),
        home_page_url=draw(optional),
        status_page_url=draw(optional),
        health_check_url=draw(optional),
        secure_health_check_url=draw(optional),
        vip_address=draw(optional),
        secure_vip_address=draw(optional),
        last_updated_ms=draw(st.integers(0, 2**48)),
        last_dirty_ms=draw(st.integers(0, 2**48)),
        action_type=draw(st.sampled_from(list(ActionType))),
        asg_name=draw(optional),
    )
