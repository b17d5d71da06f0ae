"""Forms of the reviewer pages. They check shape and size only: what a person may do is decided by the
services, whose refusals the views put back on these forms next to the field they name."""

import json
from typing import cast

from django import forms

from accounts.forms import ONE_TIME_CODE, normalized_code, passkey_answer_field
from approvals.models import Proposal
from approvals.models.risk import RATED_RISKIEST_FIRST
from approvals.templatetags.agent_text import agent_text_value
from lib import agent_text as rules


class AgentValueInput(forms.TextInput):
    """A text input holding an agent's value: hidden characters travel as character references."""

    def format_value(self, value):
        formatted = super().format_value(value)
        return None if formatted is None else agent_text_value(formatted)


class AgentValueTextarea(forms.Textarea):
    def format_value(self, value):
        formatted = super().format_value(value)
        return None if formatted is None else agent_text_value(formatted)


def one_time_code_field() -> forms.CharField:
    """The step-up code of the decision and edit forms (the services say when it is required)."""
    return forms.CharField(
        label="One-time code",
        required=False,
        max_length=20,
        widget=forms.TextInput(attrs={**ONE_TIME_CODE, "size": 8}),
    )


class DecisionForm(forms.Form):
    """Approve, Reject and Ask are named submit buttons of this one form. Which text is required depends on
    the button (a reason to reject, a question to ask); the services say so, and the view shows it here."""

    ACTIONS = (("approve", "Approve"), ("reject", "Reject"), ("ask", "Ask for information"))

    action = forms.ChoiceField(
        choices=ACTIONS,
        error_messages={
            "required": "Choose Approve, Reject or Ask for information.",
            "invalid_choice": "Choose Approve, Reject or Ask for information.",
        },
    )
    digest = forms.CharField(max_length=80, widget=forms.HiddenInput)
    reason = forms.CharField(
        label="Reason", required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 3})
    )
    reservation = forms.CharField(
        label="Your reservation",
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    question = forms.CharField(
        label="Question for the agent",
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3}),
    )
    otp_code = one_time_code_field()
    passkey = passkey_answer_field()

    def clean_otp_code(self):
        return normalized_code(self.cleaned_data.get("otp_code"))


class RevokeForm(forms.Form):
    """Take back a released decision, or, once the agent started the work, record how it was compensated."""

    action = forms.ChoiceField(choices=(("revoke", "Revoke"), ("compensate", "Record compensation")))
    reason = forms.CharField(
        label="Why revoke it", required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2})
    )
    note = forms.CharField(
        label="Compensation note", required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 3})
    )

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("auto_id", "revoke_%s")  # shares the page with the decision form's `reason`
        super().__init__(*args, **kwargs)


class EditArgumentsForm(forms.Form):
    """One field per argument of the proposed action. Text stays text; any other value (a number, true or
    false, a list, an object) is written as JSON, so an edit cannot silently change a value's type."""

    digest = forms.CharField(max_length=80, widget=forms.HiddenInput)
    note = forms.CharField(
        label="What you changed and why",
        required=False,
        max_length=500,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    otp_code = one_time_code_field()
    passkey = passkey_answer_field()

    def clean_otp_code(self):
        return normalized_code(self.cleaned_data.get("otp_code"))

    def __init__(self, proposal: Proposal, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.original = dict(proposal.action.get("arguments") or {})
        self.argument_fields = []
        for index, (key, value) in enumerate(sorted(self.original.items())):
            is_text = isinstance(value, str)
            initial = value if is_text else json.dumps(value, ensure_ascii=False)
            widget = AgentValueTextarea(attrs={"rows": 3}) if len(initial) > 80 else AgentValueInput()
            name = f"arg_{index}"
            hints = [] if is_text else ['a JSON value, e.g. true or ["a", "b"] (numbers are written as text)']
            if any(piece.hidden for piece in rules.pieces(initial)):
                # The field keeps them as they are; this says where they are.
                hints.append(f"The agent's value holds hidden characters: {rules.visible(initial)}")
            self.fields[name] = forms.CharField(
                label=rules.visible(key),
                initial=initial,
                required=False,
                strip=is_text,
                max_length=20000,
                widget=widget,
                help_text="; ".join(hints),
            )
            self.argument_fields.append((name, key, is_text))
        self.fields["digest"].initial = proposal.action_digest

    def bound_arguments(self):
        return [(self[name], key, is_text) for name, key, is_text in self.argument_fields]

    def clean(self):
        super().clean()
        cleaned = self.cleaned_data
        arguments = {}
        for name, key, is_text in self.argument_fields:
            raw = cleaned.get(name, "")
            if is_text:
                arguments[key] = raw
                continue
            try:
                arguments[key] = json.loads(raw)
            except (TypeError, ValueError):
                self.add_error(
                    name,
                    'This value was not text: write it as JSON, e.g. true or ["a", "b"] (numbers as text).',
                )
        cleaned["arguments"] = arguments
        return cleaned


class QueueFilterForm(forms.Form):
    """Filters of the queue and the watching list; choices are limited to the person's own tenants."""

    RISKS = (("", "Any risk"), *((risk.value, risk.label.capitalize()) for risk in RATED_RISKIEST_FIRST))

    q = forms.CharField(
        label="Search target, agent or tool",
        required=False,
        max_length=100,
        widget=forms.TextInput(attrs={"type": "search", "placeholder": "order:1182, refund, Refund Demo"}),
    )
    tenant = forms.ChoiceField(required=False)
    agent = forms.ChoiceField(required=False)
    policy = forms.ChoiceField(required=False)
    risk = forms.ChoiceField(required=False, choices=RISKS)
    state = forms.ChoiceField(required=False)

    def __init__(self, data, *, tenants, agents, policies, states=()):
        super().__init__(data)
        cast(forms.ChoiceField, self.fields["tenant"]).choices = [("", "All tenants"), *tenants]
        cast(forms.ChoiceField, self.fields["agent"]).choices = [("", "All agents"), *agents]
        cast(forms.ChoiceField, self.fields["policy"]).choices = [("", "All policies"), *policies]
        cast(forms.ChoiceField, self.fields["state"]).choices = [("", "Any state"), *states]

    def filters(self) -> dict:
        """The valid filters; an unknown value (another tenant's slug, a typo) filters nothing."""
        if not self.is_bound:
            return {}
        self.is_valid()
        return {
            name: value.strip() if name == "q" else value
            for name, value in self.cleaned_data.items()
            if value and str(value).strip()
        }


class BreakGlassForm(forms.Form):
    """An emergency release on one's own authority (approvals/services/break_glass.py decides)."""

    digest = forms.CharField(max_length=80, widget=forms.HiddenInput)
    reason = forms.CharField(
        label="Why this cannot wait for the quorum",
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3}),
    )
    otp_code = one_time_code_field()
    confirm = forms.BooleanField(
        label="I release this on my own authority; two other people will review it afterwards",
        error_messages={"required": "Tick the box to confirm the break-glass release."},
    )

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("auto_id", "glass_%s")  # shares the page with the decision form
        super().__init__(*args, **kwargs)

    def clean_otp_code(self):
        return normalized_code(self.cleaned_data.get("otp_code"))


class PostHocReviewForm(forms.Form):
    """A reviewer's verdict on a break-glass release after the fact."""

    VERDICTS = (
        ("agree", "Agree: the release was justified"),
        ("disagree", "Disagree: it should have waited for the quorum"),
    )

    review = forms.IntegerField(widget=forms.HiddenInput)
    verdict = forms.ChoiceField(
        label="Your verdict",
        choices=VERDICTS,
        widget=forms.RadioSelect,
        error_messages={"required": "Choose agree or disagree."},
    )
    note = forms.CharField(
        label="Note",
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3}),
    )

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("auto_id", "posthoc_%s")
        super().__init__(*args, **kwargs)
