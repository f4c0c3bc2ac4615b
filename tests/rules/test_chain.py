"""The rule chain, row by row against contract 6.7, and against a reference written apart."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rules import CHAIN, Decision, InstanceStatus, decide, first_match, trace

S = InstanceStatus
ABBREV = {"U": S.UP, "D": S.DOWN, "S": S.STARTING, "O": S.OUT_OF_SERVICE, "?": S.UNKNOWN, "-": None}
COLUMNS = "-UDSO?"  # the status held by the existing lease: none, UP, DOWN, STARTING, OOS, UNKNOWN

# One matrix per (claimed status, is_replication), written by hand from contract 6.7.
# Rows: the admin override (- = none); columns: the existing lease's status (see COLUMNS);
# cells: the status the chain must decide.
#   DownOrStarting: DOWN/STARTING/UNKNOWN claims are believed, whatever else is true.
#   OverrideExists: otherwise an override wins.
#   LeaseExists: otherwise, for client calls only, an existing UP/OUT_OF_SERVICE lease wins.
#   AlwaysMatch: otherwise the claim stands.
MATRICES: dict[tuple[str, bool], str] = {
    ("U", False): """
        - UUUUOU
        U UUUUUU
        D DDDDDD
        S SSSSSS
        O OOOOOO
        ? ??????
    """,
    ("U", True): """
        - UUUUUU
        U UUUUUU
        D DDDDDD
        S SSSSSS
        O OOOOOO
        ? ??????
    """,
    ("O", False): """
        - OUOOOO
        U UUUUUU
        D DDDDDD
        S SSSSSS
        O OOOOOO
        ? ??????
    """,
    ("O", True): """
        - OOOOOO
        U UUUUUU
        D DDDDDD
        S SSSSSS
        O OOOOOO
        ? ??????
    """,
}
for _claim in "DS?":
    for _repl in (False, True):
        MATRICES[(_claim, _repl)] = "\n".join(f"{o} {_claim * 6}" for o in "-UDSO?")


def _rows() -> list[tuple[S, S | None, S | None, bool, S]]:
    rows = []
    for (claimed, repl), matrix in MATRICES.items():
        for line in matrix.split("\n"):
            if not line.strip():
                continue
            override, cells = line.split()
            for existing, expected in zip(COLUMNS, cells, strict=True):
                rows.append(
                    (ABBREV[claimed], ABBREV[override], ABBREV[existing], repl, ABBREV[expected])
                )
    return rows


ROWS = _rows()


def test_table_covers_every_combination() -> None:
    """Every status x override x existing lease x replication flag has exactly one row."""
    statuses = list(S)
    options = [None, *statuses]
    expected = set(itertools.product(statuses, options, options, (False, True)))
    assert expected == {row[:4] for row in ROWS}
    assert len(expected) == len(ROWS)


@pytest.mark.parametrize(("claimed", "override", "existing", "is_replication", "expected"), ROWS)
def test_chain_decides_as_the_contract_says(
    claimed: S, override: S | None, existing: S | None, is_replication: bool, expected: S
) -> None:
    """The chain's answer for one combination is the contract's."""
    assert expected == first_match(CHAIN, claimed, override, existing, is_replication)


def reference(claimed: S, override: S | None, existing: S | None, is_replication: bool) -> S:
    """Contract 6.7 restated as one expression, independent of the rule functions."""
    if claimed not in (S.UP, S.OUT_OF_SERVICE):
        return claimed
    if override is not None:
        return override
    if not is_replication and existing in (S.UP, S.OUT_OF_SERVICE):
        return existing
    return claimed


statuses = st.sampled_from(list(S))


@given(statuses, st.none() | statuses, st.none() | statuses, st.booleans())
def test_chain_agrees_with_reference(
    claimed: S, override: S | None, existing: S | None, is_replication: bool
) -> None:
    """For any input the chain and the reference decide the same status."""
    expected = reference(claimed, override, existing, is_replication)
    assert expected == first_match(CHAIN, claimed, override, existing, is_replication)


def test_chain_without_always_match_can_fail_loudly() -> None:
    """A chain that lets every rule pass raises instead of inventing a status."""
    with pytest.raises(LookupError) as raised:
        first_match(CHAIN[1:3], S.UP, None, None, True)
    assert "no rule matched: a chain must end with always_match" == str(raised.value)


class TestParse:
    def test_is_case_insensitive(self) -> None:
        """Status names are read in any case."""
        assert S.OUT_OF_SERVICE == S.parse(" out_of_service ")

    def test_rejects_unknown_names(self) -> None:
        """An unknown name is an error that lists the valid ones."""
        with pytest.raises(ValueError) as raised:
            S.parse("SLEEPING")
        assert (
            "unknown status 'SLEEPING'; expected one of UP, DOWN, STARTING, OUT_OF_SERVICE, "
            "UNKNOWN" == str(raised.value)
        )


class TestDecide:
    def test_names_the_rule_that_answered_with_its_inputs(self):
        status, decision = decide(CHAIN, S.UP, S.OUT_OF_SERVICE, S.UP, False)
        assert S.OUT_OF_SERVICE == status
        assert Decision("OverrideExists", S.UP, S.OUT_OF_SERVICE, S.UP, False) == decision

    def test_decisions_are_shared(self):
        assert (
            decide(CHAIN, S.UP, None, None, False)[1] is decide(CHAIN, S.UP, None, None, False)[1]
        )

    def test_trace_gives_each_answer_up_to_the_deciding_rule(self):
        _, decision = decide(CHAIN, S.UP, None, S.OUT_OF_SERVICE, False)
        assert [
            ("DownOrStarting", None),
            ("OverrideExists", None),
            ("LeaseExists", S.OUT_OF_SERVICE),
        ] == trace(CHAIN, decision)

    @pytest.mark.parametrize(("claimed", "override", "existing", "is_replication", "_"), ROWS)
    def test_trace_ends_at_the_rule_and_status_decided(
        self, claimed: S, override: S | None, existing: S | None, is_replication: bool, _: S
    ):
        """Explaining a decision asks the chain again with every input it saw: its last
        answer is the rule that decided, with the status decided."""
        status, decision = decide(CHAIN, claimed, override, existing, is_replication)
        assert (decision.by, status) == trace(CHAIN, decision)[-1]

    def test_an_admins_decision_has_no_trace(self):
        assert [] == trace(
            CHAIN, Decision("an admin's override", None, S.OUT_OF_SERVICE, None, False)
        )

    def test_decide_agrees_with_first_match_everywhere(self):
        statuses = [*S, None]
        for claimed in S:
            for override in statuses:
                for existing in statuses:
                    for replication in (False, True):
                        args = (claimed, override, existing, replication)
                        assert first_match(CHAIN, *args) == decide(CHAIN, *args)[0]
