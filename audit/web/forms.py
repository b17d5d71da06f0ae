"""Forms of the compliance pages: which part of the trail to read or export."""

from datetime import datetime, timedelta

from django import forms
from django.utils import timezone

from audit.exports.lines import OUTCOMES, day_bounds
from audit.models import ExportJob


class SelectionForm(forms.Form):
    """A period (UTC days, both inclusive) and optional narrowing to matching proposals."""

    since = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(
        required=False, label="To (inclusive)", widget=forms.DateInput(attrs={"type": "date"})
    )
    policy = forms.RegexField(
        required=False, regex=r"^[-a-zA-Z0-9_]+(@\d+)?$", max_length=120, help_text="slug or slug@version"
    )
    agent = forms.SlugField(required=False, max_length=100, help_text="agent slug")
    reviewer = forms.CharField(required=False, max_length=150, help_text="username")
    outcome = forms.ChoiceField(
        required=False,
        choices=[("", "any")] + [(o, o.replace("_", " ")) for o in OUTCOMES],
        help_text="reached at any time",
    )

    def clean(self):
        super().clean()
        data = self.cleaned_data
        since, until = data.get("since"), data.get("until")
        if since and until and until < since:
            self.add_error("until", "The end of the period is before its start.")
        return data

    def filters(self) -> dict:
        data = self.cleaned_data
        return {
            **day_bounds(data.get("since"), data.get("until")),
            **{name: (data.get(name) or "").strip() for name in ("policy", "agent", "reviewer", "outcome")},
        }


class ExportForm(SelectionForm):
    format = forms.ChoiceField(
        choices=ExportJob.Kind.choices, initial=ExportJob.Kind.CSV, widget=forms.RadioSelect
    )


class PeriodForm(forms.Form):
    """The metrics page's period: the last N days, or explicit dates."""

    DAYS = [(7, "7 days"), (30, "30 days"), (90, "90 days"), (365, "365 days")]

    days = forms.TypedChoiceField(
        required=False,
        coerce=int,
        choices=DAYS,
        empty_value=30,  # type: ignore[arg-type]  # django-stubs says str; Django returns any value as given
        initial=30,
        label="Last",
    )
    since = forms.DateField(required=False, label="or from", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(
        required=False, label="to (inclusive)", widget=forms.DateInput(attrs={"type": "date"})
    )

    def bounds(self) -> tuple[datetime, datetime | None]:
        data = self.cleaned_data if self.is_valid() else {}
        if data.get("since"):
            bounds = day_bounds(data["since"], data.get("until"))
            return (
                datetime.fromisoformat(bounds["since"].replace("Z", "+00:00")),
                datetime.fromisoformat(bounds["until"].replace("Z", "+00:00")) if bounds["until"] else None,
            )
        today = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
        return today - timedelta(days=(data.get("days") or 30) - 1), None
