"""The differential test's judge (tests/differential.py): an excuse covers the paths it names
and nothing else, never a status but a bad-input step's exact 400, and goes stale when what it
names stops differing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.differential import Excuse, differences, judged, reduced

DELTA = Excuse("versions__delta differs", frozenset({".json.applications.versions__delta"}))
BODY = Excuse("error bodies differ", frozenset({".json"}))
STATUS_400 = Excuse("400 where Eureka answers 500", eureka_status=500)


def delta(version: str, *, status: int = 200, ids: tuple[str, ...] = ("o-1",)) -> dict[str, Any]:
    doc = {
        "applications": {
            "versions__delta": version,
            "apps__hashcode": "UP_1_",
            "application": [
                {
                    "name": "ORDERS",
                    "instance": [{"instanceId": i, "actionType": "ADDED"} for i in ids],
                }
            ],
        }
    }
    return {"status": status, "json": doc}


def verdict(step: str, eureka: dict[str, Any], ours: dict[str, Any], *excuses: Excuse) -> Any:
    return judged({step: list(differences(eureka, ours))}, {step: excuses})


class TestExcusedPaths:
    def test_a_difference_only_under_the_excused_path_passes(self) -> None:
        """Answers that differ in versions__delta alone pass when it is excused."""
        assert verdict("delta", delta("1"), delta("5"), DELTA)

    def test_a_status_difference_fails_beside_an_excused_path(self) -> None:
        """A 200 against Eureka's 404 fails though the step's body path is excused."""
        result = verdict("delta", delta("1", status=404), delta("5"), DELTA)
        assert ([".status"], {}) == (
            [d.path for d in result.unexplained["delta"]],
            result.stale,
        )

    def test_a_difference_beside_the_excused_path_fails(self) -> None:
        """An instance left out of the delta fails though versions__delta is excused."""
        result = verdict("delta", delta("1", ids=("o-1", "o-2")), delta("5"), DELTA)
        assert [".json.applications.application[0].instance"] == [
            d.path for d in result.unexplained["delta"]
        ]

    def test_a_path_covers_what_lies_under_it_and_no_namesake(self) -> None:
        """ ".json" covers ".json.error", not a sibling key that starts with the same letters."""
        eureka = {"status": 404, "json": {"error": "Not Found"}, "jsonp": "a"}
        ours = {"status": 404, "json": {"error": "unknown_instance"}, "jsonp": "b"}
        result = verdict("cancel again", eureka, ours, BODY)
        assert [".jsonp"] == [d.path for d in result.unexplained["cancel again"]]

    def test_an_excuse_whose_path_no_longer_differs_is_stale(self) -> None:
        """An excused path found the same fails the verdict."""
        result = verdict("delta", delta("5"), delta("5"), DELTA)
        assert (False, {"delta": [".json.applications.versions__delta"]}) == (
            bool(result),
            result.stale,
        )

    def test_an_excuse_may_not_name_the_status(self) -> None:
        """A status is excused only through eureka_status, as an exact pair."""
        with pytest.raises(ValueError, match="status"):
            Excuse("no", frozenset({".status"}))


class TestStatusExcuse:
    def test_ours_400_where_eureka_answers_500_passes(self) -> None:
        """The named pair is excused on a bad-input step."""
        eureka = reduced(500, "application/json", b'{"error": "Internal Server Error"}')
        ours = reduced(400, "application/json", b'{"error": "bad_input"}')
        assert verdict("bad input: x", eureka, ours, STATUS_400, BODY)

    @pytest.mark.parametrize(("eureka", "ours"), [(500, 204), (500, 404), (404, 400)])
    def test_any_other_status_pair_fails(self, eureka: int, ours: int) -> None:
        """Accepting the bad input, or any pair but the named one, fails."""
        result = verdict("bad input: x", {"status": eureka}, {"status": ours}, STATUS_400)
        assert [".status"] == [d.path for d in result.unexplained["bad input: x"]]

    def test_the_status_excuse_covers_nothing_of_the_body(self) -> None:
        """With only the status excused, the error bodies' difference still fails."""
        eureka = {"status": 500, "json": {"error": "Internal Server Error"}}
        ours = {"status": 400, "json": {"error": "bad_input"}}
        result = verdict("bad input: x", eureka, ours, STATUS_400)
        assert [".json.error"] == [d.path for d in result.unexplained["bad input: x"]]

    def test_only_a_bad_input_step_may_excuse_its_status(self) -> None:
        """A 400 where Eureka answers otherwise is bad input's answer, no other step's."""
        with pytest.raises(ValueError, match="bad-input"):
            verdict("heartbeat", {"status": 500}, {"status": 400}, STATUS_400)
