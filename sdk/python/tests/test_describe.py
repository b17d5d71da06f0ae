"""reviewer_gate.describe: what a tool call's proposal says, from a ToolDescription or the defaults."""

import pytest

from reviewer_gate.describe import ToolDescription, ToolDescriptionError

ARGUMENTS = {"order_id": "7002", "amount": "22.00", "currency": "USD"}


def test_the_arguments_currency_wins_over_the_descriptions():
    fields = ToolDescription(summary="Refund {currency} {amount}", currency="EUR").request_fields(
        "refund", ARGUMENTS
    )
    assert fields["summary"] == "Refund USD 22.00"
    assert (fields["consequences"]["amount"], fields["consequences"]["currency"]) == ("22.00", "USD")


def test_the_default_summary_lists_the_arguments_in_the_schemas_order_with_the_currency_by_the_amount():
    fields = ToolDescription().request_fields(
        "refund", ARGUMENTS, tool_text="Refund an order.\nMore.", argument_order=("amount", "order_id")
    )
    assert fields["summary"] == "Refund an order: amount USD 22.00, order_id 7002"
    assert fields["action"] == {"tool": "refund", "arguments": ARGUMENTS, "target": "order_id:7002"}
    assert "principal" not in fields  # the adapter's own default applies


def test_a_principal_function_that_returns_no_id_is_refused_before_anything_is_sent():
    description = ToolDescription(principal=lambda context: {"display": "nobody"})
    with pytest.raises(ToolDescriptionError) as refused:
        description.request_fields("refund", ARGUMENTS, context={})
    assert refused.value.field == "principal"


@pytest.mark.parametrize(
    ("description", "field"),
    [
        (ToolDescription(consequences="x" * 2001), "consequences"),
        (ToolDescription(summary="Refund {amount"), "summary"),
        (ToolDescription(name="n" * 201), "name"),
        (ToolDescription(principal="casey"), "principal"),
    ],
)
def test_a_description_that_cannot_work_names_its_field(description, field):
    with pytest.raises(ToolDescriptionError) as refused:
        description.checked("refund", tuple(ARGUMENTS))
    assert refused.value.field == field
