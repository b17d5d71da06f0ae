"""Reviewer pages: sign-in and enrollment, the queue, the watching list, the proposal page and its
decisions (approve, reject, ask, edit, revoke).

Every reviewer page needs a person signed in with a password and a one-time code (`verified_required`).
Proposal views start with `_proposal_for_reviewer`, which answers 404 to anyone outside the proposal's
tenant. Views read, and write only through services; a refusal is a ServiceError whose message is shown
next to the field it names, with its HTTP status. The page builders below (`queue_context`,
`detail_context`, ...) are shared with the WebSocket consumers, which send the same partials.
"""

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass, field
from functools import wraps
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth import login as auth_login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.core.paginator import Paginator
from django.db import NotSupportedError
from django.db.models import (
    BooleanField,
    Count,
    Exists,
    F,
    Func,
    IntegerField,
    OuterRef,
    Prefetch,
    Q,
    Subquery,
)
from django.db.models.functions import Coalesce
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect
from django_otp import login as otp_login

from approvals import keys, policy, services, stepup
from approvals.forms import (
    DecisionForm,
    EditArgumentsForm,
    EnrollForm,
    LoginForm,
    QueueFilterForm,
    RevokeForm,
)
from approvals.lists import QUEUE, WATCHING
from approvals.models import Agent, Decision, Policy, PolicyVersion, Proposal, TenantMembership, Vote
from approvals.qr import qr_svg
from approvals.states import RELEASED, State

PAGE_SIZE = 25
# Agent text is untrusted and can be long: cap what a page shows and say so when it is cut.
TEXT_CAP = 2000
EXCERPT_CAP = 600
STARTED = frozenset({State.EXECUTING, State.UNKNOWN, State.SUCCEEDED, State.FAILED})


@require_GET
def jwks(request):
    response = JsonResponse(keys.jwks())
    response["Cache-Control"] = "public, max-age=300"
    return response


# ---------------------------------------------------------------------------------------------------
# Guards


def verified_required(view):
    """Signed in and verified with a one-time code in this session. Someone signed in without an
    authenticator is sent to enroll one; anyone else to the sign-in page."""

    @wraps(view)
    def guarded(request, *args, **kwargs):
        user = request.user
        if user.is_authenticated and user.is_verified():
            return view(request, *args, **kwargs)
        if user.is_authenticated and not stepup.user_has_device(user):
            target = reverse("approvals:enroll")
        else:
            target = redirect_to_login(request.get_full_path())["Location"]
        return HttpResponseClientRedirect(target) if request.htmx else redirect(target)

    return guarded


def _proposal_for_reviewer(request, proposal_id) -> Proposal:
    try:
        return services.proposal_for_user(proposal_id, request.user)
    except services.NotFound:
        raise Http404("no such proposal") from None


# ---------------------------------------------------------------------------------------------------
# Sign-in and enrollment


def _next_url(request) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return reverse("approvals:queue")


@sensitive_post_parameters("password", "otp_token")
@never_cache
@require_http_methods(["GET", "POST"])
def login_view(request):
    form = LoginForm(request, data=request.POST if request.method == "POST" else None)
    if form.is_bound and form.is_valid():
        auth_login(request, form.get_user())
        if form.device is None:
            return redirect("approvals:enroll")
        otp_login(request, form.device)
        return redirect(_next_url(request))
    throttled = form.has_error("__all__", "throttled")
    if form.user_cache is not None and (throttled or form.has_error("__all__", "invalid_login")):
        # The password was right, the code was not.
        services.record_sign_in_code_refused(form.user_cache, throttled=throttled)
    status = 400 if form.is_bound else 200
    return render(
        request, "registration/login.html", {"form": form, "next": _next_url(request)}, status=status
    )


@sensitive_post_parameters("otp_token")
@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def enroll(request):
    user = request.user
    if stepup.user_has_device(user):
        if not user.is_verified():
            return redirect_to_login(reverse("approvals:queue"))
        return render(request, "approvals/enroll.html", {"already_enrolled": True})
    device = services.start_totp_enrollment(user)
    form = EnrollForm(request.POST if request.method == "POST" else None)
    status = 200
    if form.is_bound:
        status = 400
        if form.is_valid():
            try:
                device, codes = services.confirm_totp_enrollment(user, code=form.cleaned_data["otp_token"])
            except services.ServiceError as error:
                form.add_error("otp_token", error.message)
                status = error.http_status
            else:
                otp_login(request, device)
                # Shown once, in this response only: nothing stores them for a later page.
                return render(request, "approvals/enroll.html", {"backup_codes": codes})
    secret = _key_for_typing(device)
    return render(
        request,
        "approvals/enroll.html",
        {"form": form, "qr_svg": qr_svg(device.config_url), "secret": secret},
        status=status,
    )


def _key_for_typing(device) -> str:
    """The key in base32, in groups of four, for typing into an app by hand."""
    from base64 import b32encode

    text = b32encode(device.bin_key).decode().rstrip("=")
    return " ".join(text[i : i + 4] for i in range(0, len(text), 4))


# ---------------------------------------------------------------------------------------------------
# Who sees what: the queue (what you can decide now) and the watching list (everything else)


class ThresholdNamesAnyGroup(Func):
    """True when a proposal's requirements name one of `slugs` in a threshold. Exact on both databases,
    whatever the number of thresholds (JSON containment has no SQLite form in Django)."""

    output_field = BooleanField()

    def __init__(self, slugs):
        super().__init__(F("requirements"))
        self.slugs = sorted(slugs)

    def _compile(self, compiler, connection, template):
        column, params = compiler.compile(self.source_expressions[0])
        marks = ", ".join(["%s"] * len(self.slugs))
        return template.format(column=column, marks=marks), (*params, *self.slugs)

    def as_sqlite(self, compiler, connection, **extra):
        return self._compile(
            compiler,
            connection,
            "EXISTS (SELECT 1 FROM json_each({column}, '$.thresholds') AS t "
            "WHERE json_extract(t.value, '$.group') IN ({marks}))",
        )

    def as_postgresql(self, compiler, connection, **extra):
        return self._compile(
            compiler,
            connection,
            "EXISTS (SELECT 1 FROM jsonb_array_elements({column} -> 'thresholds') AS t(item) "
            "WHERE t.item ->> 'group' IN ({marks}))",
        )

    def as_sql(self, compiler, connection, **extra):
        raise NotSupportedError("the reviewer queue supports SQLite and PostgreSQL")


@dataclass
class ReviewerScope:
    """A person's tenants and groups, read once per page (two queries)."""

    user: object
    memberships: list = field(default_factory=list)
    group_slugs: dict = field(default_factory=dict)  # tenant id -> {group slug}

    @classmethod
    def of(cls, user) -> "ReviewerScope":
        memberships = list(
            TenantMembership.objects.filter(user=user).select_related("tenant").order_by("tenant__name")
        )
        slugs = defaultdict(set)
        for tenant_id, slug in user.approver_groups.values_list("tenant_id", "slug"):
            slugs[tenant_id].add(slug)
        return cls(user=user, memberships=memberships, group_slugs=dict(slugs))

    @property
    def tenant_ids(self) -> list[int]:
        return [m.tenant_id for m in self.memberships]

    @property
    def votes(self) -> bool:
        return any(m.role != TenantMembership.Role.COMPLIANCE for m in self.memberships)

    def eligible(self) -> Q:
        """The SQL form of services.ineligibility() for many proposals at once."""
        clauses = Q(pk__in=[])
        for membership in self.memberships:
            slugs = self.group_slugs.get(membership.tenant_id)
            if membership.role == TenantMembership.Role.COMPLIANCE or not slugs:
                continue
            clause = Q(tenant_id=membership.tenant_id) & Q(ThresholdNamesAnyGroup(slugs))
            if membership.principal_id:
                clause &= ~Q(principal_id=membership.principal_id) | Q(requirements__self_approval=True)
            clauses |= clause
        return clauses


def eligible_proposals(scope: ReviewerScope):
    """What this person can decide now: waiting, not expired by the clock, they are eligible, not the
    principal, not the edit's author, and they have not voted on it yet."""
    voted = Vote.objects.filter(proposal=OuterRef("pk"), voter=scope.user)
    return (
        Proposal.objects.filter(scope.eligible(), state=State.AWAITING_REVIEW, expires_at__gt=timezone.now())
        .exclude(edited_by=scope.user)
        .exclude(Exists(voted))
    )


def watching_proposals(scope: ReviewerScope):
    return Proposal.objects.filter(tenant_id__in=scope.tenant_ids).exclude(
        pk__in=eligible_proposals(scope).values("pk")
    )


def _with_row_data(queryset):
    approvals = (
        Vote.objects.filter(proposal=OuterRef("pk"), verdict=Vote.Verdict.APPROVE)
        .values("proposal")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return (
        queryset.select_related("agent", "tenant")
        .annotate(approval_count=Coalesce(Subquery(approvals, output_field=IntegerField()), 0))
        .prefetch_related(
            Prefetch(
                "policy_versions",
                queryset=PolicyVersion.objects.select_related("policy").order_by("policy__slug"),
            )
        )
    )


def _filter_form(scope: ReviewerScope, params, *, with_states=False) -> QueueFilterForm:
    agents = Agent.objects.filter(tenant_id__in=scope.tenant_ids).order_by("name").values_list("slug", "name")
    policies = (
        Policy.objects.filter(tenant_id__in=scope.tenant_ids)
        .order_by("name")
        .values_list("slug", "name")
        .distinct()
    )
    return QueueFilterForm(
        params or None,
        tenants=[(m.tenant.slug, m.tenant.name) for m in scope.memberships],
        agents=list(agents),
        policies=list(policies),
        states=[(s.value, s.label) for s in State] if with_states else (),
    )


def _apply_filters(queryset, filters: dict):
    if "tenant" in filters:
        queryset = queryset.filter(tenant__slug=filters["tenant"])
    if "agent" in filters:
        queryset = queryset.filter(agent__slug=filters["agent"])
    if "risk" in filters:
        queryset = queryset.filter(risk=filters["risk"])
    if "state" in filters:
        queryset = queryset.filter(state=filters["state"])
    if "policy" in filters:
        pinned = Proposal.policy_versions.through.objects.filter(
            proposal_id=OuterRef("pk"), policyversion__policy__slug=filters["policy"]
        )
        queryset = queryset.filter(Exists(pinned))
    return queryset


def _rows(page) -> list[dict]:
    rows = []
    for proposal in page:
        thresholds = proposal.requirements.get("thresholds", [])
        rows.append(
            {
                "proposal": proposal,
                "needed": sum(int(t.get("count", 0)) for t in thresholds),
                "groups": [t.get("group") for t in thresholds],
                "policies": [f"{v.policy.slug}@{v.version}" for v in proposal.policy_versions.all()],
            }
        )
    return rows


def _list_context(scope, params, queryset, *, order, with_states=False) -> dict:
    form = _filter_form(scope, params, with_states=with_states)
    filters = form.filters()
    filtered = _apply_filters(queryset, filters)
    paginator = Paginator(_with_row_data(filtered).order_by(*order), PAGE_SIZE)
    page = paginator.get_page((params or {}).get("page"))

    def page_link(number):
        return "?" + urlencode({**filters, "page": number})

    return {
        "form": form,
        "filters": filters,
        "page": page,
        "rows": _rows(page),
        "total": paginator.count,
        "previous_link": page_link(page.previous_page_number()) if page.has_previous() else "",
        "next_link": page_link(page.next_page_number()) if page.has_next() else "",
        "socket_query": urlencode({**filters, **({"page": page.number} if page.number > 1 else {})}),
        "server_now": timezone.now(),
        "votes": scope.votes,
    }


def queue_context(user, params) -> dict:
    scope = ReviewerScope.of(user)
    context = _list_context(scope, params, eligible_proposals(scope), order=("expires_at", "pk"))
    by_risk = dict(
        _apply_filters(
            eligible_proposals(scope), {k: v for k, v in context["filters"].items() if k != "risk"}
        )
        .values_list("risk")
        .annotate(n=Count("pk"))
        .order_by()
    )
    labels = [(value, label) for value, label in QueueFilterForm.RISKS if value] + [("", "Not rated")]
    context["risk_counts"] = [(label, by_risk[value]) for value, label in labels if by_risk.get(value)]
    return context


def watching_context(user, params) -> dict:
    scope = ReviewerScope.of(user)
    return _list_context(
        scope, params, watching_proposals(scope), order=("-created_at", "-pk"), with_states=True
    )


@require_GET
@verified_required
def queue(request):
    context = {**queue_context(request.user, request.GET), "list_page": QUEUE, "nav": "queue"}
    return render(request, "approvals/proposal_list.html", context)


@require_GET
@verified_required
def watching(request):
    context = {**watching_context(request.user, request.GET), "list_page": WATCHING, "nav": "watching"}
    return render(request, "approvals/proposal_list.html", context)


# ---------------------------------------------------------------------------------------------------
# The proposal page


def _capped(value, limit=TEXT_CAP) -> dict:
    text = _display(value)
    return {"text": text[:limit], "truncated": len(text) > limit, "length": len(text)}


def _display(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _label(key: str) -> str:
    return str(key).replace("_", " ").replace(".", " › ").strip().capitalize() or "(unnamed)"


def _amount(consequences: dict, arguments: dict) -> tuple[str, str]:
    """How much, and the agent's own figure when it differs from the arguments (what the digest binds)."""
    bound, bound_currency = arguments.get("amount"), arguments.get("currency")
    stated, stated_currency = consequences.get("amount"), consequences.get("currency")
    if bound in (None, ""):
        bound, bound_currency = stated, stated_currency
    shown = f"{_display(bound)} {_display(bound_currency or '')}".strip() if bound not in (None, "") else ""
    differs = (stated not in (None, "") and _display(stated) != _display(bound)) or (
        stated_currency and bound_currency and stated_currency != bound_currency
    )
    claim = f"{_display(stated)} {_display(stated_currency or '')}".strip() if differs else ""
    return shown, claim


def _consequence(proposal: Proposal) -> dict:
    """What happens, to whom, how much, whether it can be undone, and which data leaves: in the agent's
    words, in a fixed order, with what the agent did not state said plainly."""
    facts = dict(proposal.consequences or {})
    amount, claim = _amount(facts, proposal.action.get("arguments") or {})
    facts.pop("amount", None)
    facts.pop("currency", None)
    reversible = facts.pop("reversible", None)
    data_leaves = facts.pop("data_leaves", None)
    effect = facts.pop("effect", None)
    return {
        "summary": _capped(proposal.summary, 500),
        "effect": _capped(effect) if effect not in (None, "") else None,
        "amount": _capped(amount) if amount else None,
        "amount_mismatch": _capped(claim) if claim else None,
        "target": _capped(proposal.action.get("target")) if proposal.action.get("target") else None,
        "principal": proposal.principal_display or proposal.principal_id,
        "principal_id": proposal.principal_id,
        "reversible": reversible if isinstance(reversible, bool) else None,
        "reversible_text": (
            _capped(reversible) if reversible is not None and not isinstance(reversible, bool) else None
        ),
        "data_leaves": None if data_leaves in (None, "") else _capped(data_leaves),
        "no_data_leaves": (
            isinstance(data_leaves, str) and data_leaves.strip().lower() in {"none", "no", "nothing"}
        ),
        "other": [{"label": _label(k), "value": _capped(v)} for k, v in sorted(facts.items())],
    }


def _argument_changes(before: dict, after: dict) -> list[dict]:
    keys_in_order = sorted(set(before) | set(after))
    return [
        {
            "label": key,
            "before": _capped(before.get(key)) if key in before else None,
            "after": _capped(after.get(key)) if key in after else None,
        }
        for key in keys_in_order
        if before.get(key, _MISSING) != after.get(key, _MISSING)
    ]


_MISSING = object()


def reviewed_context(proposal: Proposal) -> dict:
    """What the reviewer reads before deciding. Built from the proposal's immutable fields only, so the
    same page renders the same bytes; their sha256 (`page_hash`) goes into the vote's audit event."""
    arguments = proposal.action.get("arguments") or {}
    predecessor = proposal.supersedes
    changed_keys = set()
    edit_changes = []
    if predecessor is not None:
        edit_changes = _argument_changes(predecessor.action.get("arguments") or {}, arguments)
        changed_keys = {change["label"] for change in edit_changes}
    return {
        "proposal": proposal,
        "consequence": _consequence(proposal),
        # Sorted, as in the canonical form: PostgreSQL's jsonb does not keep the agent's key order anyway.
        "arguments": [
            {"label": key, "value": _capped(value), "changed": key in changed_keys}
            for key, value in sorted(arguments.items())
        ],
        "other_action_fields": [
            {"label": _label(k), "value": _capped(v)}
            for k, v in proposal.action.items()
            if k not in {"tool", "arguments", "target"}
        ],
        "diff": [
            {
                "field": _capped(entry.get("field"), 200),
                "before": _capped(entry.get("before")),
                "after": _capped(entry.get("after")),
                "changed": entry.get("before") != entry.get("after"),
            }
            for entry in proposal.diff or []
        ],
        "evidence": [
            {
                "title": _capped(item.get("title") or "Untitled evidence", 200),
                "url": item.get("url") or "",
                "excerpt": _capped(item.get("excerpt"), EXCERPT_CAP),
            }
            for item in proposal.evidence or []
        ],
        "predecessor": predecessor,
        "edit_changes": edit_changes,
    }


REVIEWED_PARTIALS = ("consequence", "material", "canonical")


def page_hash(proposal: Proposal) -> str:
    """sha256 over the rendered consequence, arguments (with diff and evidence) and canonical action +
    digest sections of the proposal page: the audit records what the reviewer was shown."""
    context = reviewed_context(proposal)
    digest = hashlib.sha256()
    for name in REVIEWED_PARTIALS:
        digest.update(render_to_string(f"approvals/detail.html#{name}", context).encode())
    return "sha256:" + digest.hexdigest()


def _step_up_text(mode: str) -> str:
    if mode == policy.PER_VOTE:
        return "a fresh one-time code with every vote"
    minutes, seconds = divmod(int(mode), 60)
    return f"a one-time code entered within the last {minutes} min" + (f" {seconds} s" if seconds else "")


def _why_context(proposal: Proposal, user, groups: dict, why_not: tuple[str, str] | None) -> dict:
    return {
        "pinned": list(proposal.policy_versions.select_related("policy").order_by("policy__slug")),
        "thresholds": [
            {"group": groups.get(t["group"]), "slug": t["group"], "count": t["count"]}
            for t in proposal.requirements.get("thresholds", [])
        ],
        "step_up_text": _step_up_text(proposal.requirements.get("step_up", policy.PER_VOTE)),
        "self_approval": proposal.requirements.get("self_approval", False),
        "why_not": why_not[1] if why_not else "",
        "my_groups": services.user_groups_for(proposal, user, groups) if why_not is None else [],
    }


def live_context(proposal: Proposal, groups: dict | None = None) -> dict:
    """State, time left, quorum progress and votes: the part of the page that changes while it is open."""
    groups = groups if groups is not None else services.threshold_groups(proposal)
    quorum = services.count_quorum(proposal)
    placed = {vote.pk: slug for slug, votes in quorum.slots.items() for vote in votes}
    votes = list(proposal.votes.select_related("voter").order_by("created_at"))
    progress = []
    for threshold in quorum.required:
        filled = quorum.slots.get(threshold["group"], [])
        progress.append(
            {
                "group": groups.get(threshold["group"]),
                "slug": threshold["group"],
                "count": int(threshold["count"]),
                "filled": filled,
                "missing": max(int(threshold["count"]) - len(filled), 0),
                "slots": [True] * len(filled) + [False] * max(int(threshold["count"]) - len(filled), 0),
            }
        )
    return {
        "proposal": proposal,
        "quorum": quorum,
        "progress": progress,
        "missing_total": sum(item["missing"] for item in progress),
        "votes": [
            {"vote": vote, "group": groups.get(placed.get(vote.pk)), "counts": vote.pk in placed}
            for vote in votes
        ],
        "decision": Decision.objects.filter(proposal=proposal).first(),
        "server_now": timezone.now(),
    }


def decision_mode(proposal: Proposal, user, live: dict, why_not: tuple[str, str] | None) -> tuple[str, str]:
    """Which controls the decision panel shows this person now, and why none when they cannot decide.
    Only what to show: the services decide again when the person acts."""
    if proposal.state == State.AWAITING_REVIEW:
        if any(item["vote"].voter_id == user.pk for item in live["votes"]):
            return "voted", ""
        if why_not:
            return "ineligible", why_not[1]
        if timezone.now() >= proposal.expires_at:
            return (
                "ineligible",
                "it expired by the server's clock; nothing will run, and the agent must ask again",
            )
        return "vote", ""
    decision = live["decision"]
    role = services.tenant_role(user, proposal.tenant_id)
    approved_it = any(
        item["vote"].voter_id == user.pk and item["vote"].verdict == Vote.Verdict.APPROVE
        for item in live["votes"]
    )
    if (
        proposal.state in RELEASED
        and decision
        and not decision.consumed_at
        and (role == TenantMembership.Role.ADMIN or approved_it)
    ):
        return "revocable", ""
    if proposal.state in STARTED and role in {TenantMembership.Role.ADMIN, TenantMembership.Role.REVIEWER}:
        return "started", ""
    return "closed", ""


def decision_context(
    proposal: Proposal, user, session, live: dict, why_not, *, form=None, revoke_form=None, notice: str = ""
) -> dict:
    mode, reason = decision_mode(proposal, user, live, why_not)
    step_up = proposal.requirements.get("step_up", policy.PER_VOTE)
    fresh = step_up != policy.PER_VOTE and stepup.fresh_within(session, int(step_up))
    return {
        "proposal": proposal,
        "mode": mode,
        "why_not": reason,
        "form": form or DecisionForm(initial={"digest": proposal.action_digest}),
        "revoke_form": revoke_form or RevokeForm(),
        "needs_code": not fresh,
        "step_up_text": _step_up_text(step_up),
        "code_hint": f"Six digits from your authenticator app, or a backup code: this vote needs "
        f"{_step_up_text(step_up)}.",
        "my_vote": next((item["vote"] for item in live["votes"] if item["vote"].voter_id == user.pk), None),
        "missing_total": live["missing_total"],
        "decision": live["decision"],
        "notice": notice,
    }


def detail_context(proposal: Proposal, user, session, **decision_kwargs) -> dict:
    """Everything the proposal page shows this person (the consumer re-renders its partials from it)."""
    groups = services.threshold_groups(proposal)
    live = live_context(proposal, groups)
    why_not = services.ineligibility(proposal, user)
    return {
        **reviewed_context(proposal),
        **live,
        "why": _why_context(proposal, user, groups, why_not),
        "successor": Proposal.objects.filter(supersedes=proposal).only("id", "state", "summary").first(),
        "decision_panel": decision_context(proposal, user, session, live, why_not, **decision_kwargs),
    }


@require_GET
@verified_required
def detail(request, proposal_id):
    proposal = _proposal_for_reviewer(request, proposal_id)
    return render(request, "approvals/detail.html", detail_context(proposal, request.user, request.session))


def _field_for(error: services.ServiceError, form) -> str | None:
    """The visible field a refusal is about; anything else (the hidden digest) is shown above the form."""
    return (
        error.field if error.field in form.fields and not form.fields[error.field].widget.is_hidden else None
    )


def _decision_response(request, proposal: Proposal, status: int, **decision_kwargs) -> HttpResponse:
    """The decision panel (and the live section, out of band) for htmx; the whole page otherwise."""
    proposal = services.proposal_for_user(proposal.id, request.user)  # re-read after the service ran
    context = detail_context(proposal, request.user, request.session, **decision_kwargs)
    if not request.htmx:
        return render(request, "approvals/detail.html", context, status=status)
    html = render_to_string("approvals/detail.html#decision", context, request=request) + render_to_string(
        "approvals/detail.html#live", {**context, "oob": True}, request=request
    )
    return HttpResponse(html, status=status)


DONE_MESSAGES = {
    "approve": "Your approval is recorded.",
    "reject": "Your rejection is recorded; the agent will not act.",
    "ask": "Your question was sent to the agent. It answers with a new proposal.",
}


@require_POST
@verified_required
def decide(request, proposal_id):
    proposal = _proposal_for_reviewer(request, proposal_id)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        return _decision_response(request, proposal, 400, form=form)
    data = form.cleaned_data
    try:
        if data["action"] == "ask":
            services.request_info(
                proposal.id, request.user, question=data["question"], digest_seen=data["digest"]
            )
        else:
            services.cast_vote(
                proposal.id,
                request.user,
                verdict=data["action"],
                digest_seen=data["digest"],
                reason=data["reason"],
                otp_code=data["otp_code"],
                session=request.session,
                page_hash=page_hash(proposal),
            )
    except services.ServiceError as error:
        form.add_error(_field_for(error, form), error.message)
        return _decision_response(request, proposal, error.http_status, form=form)
    if request.htmx:
        return _decision_response(request, proposal, 200, notice=DONE_MESSAGES[data["action"]])
    messages.success(request, DONE_MESSAGES[data["action"]])
    return redirect("approvals:detail", proposal_id=proposal.id)


@require_POST
@verified_required
def revoke(request, proposal_id):
    """Revoke a released decision; once the agent has started, record a compensation note instead."""
    proposal = _proposal_for_reviewer(request, proposal_id)
    form = RevokeForm(request.POST)
    if not form.is_valid():
        return _decision_response(request, proposal, 400, revoke_form=form)
    data = form.cleaned_data
    try:
        if data["action"] == "compensate":
            services.note_compensation(proposal.id, request.user, note=data["note"])
            done = "Your compensation note is recorded."
        else:
            services.revoke_decision(proposal.id, request.user, reason=data["reason"])
            done = "The decision is revoked; the agent's task is being cancelled."
    except services.ServiceError as error:
        form.add_error(_field_for(error, form), error.message)
        return _decision_response(request, proposal, error.http_status, revoke_form=form)
    if request.htmx:
        return _decision_response(request, proposal, 200, notice=done)
    messages.success(request, done)
    return redirect("approvals:detail", proposal_id=proposal.id)


@require_http_methods(["GET", "POST"])
@verified_required
def edit(request, proposal_id):
    """Edit the arguments into a successor proposal (new digest, votes start again)."""
    proposal = _proposal_for_reviewer(request, proposal_id)
    form = EditArgumentsForm(proposal, request.POST if request.method == "POST" else None)
    status = 200
    if form.is_bound:
        status = 400
        if form.is_valid():
            try:
                successor = services.edit_proposal(
                    proposal.id,
                    request.user,
                    arguments=form.cleaned_data["arguments"],
                    digest_seen=form.cleaned_data["digest"],
                    note=form.cleaned_data["note"],
                )
            except services.ServiceError as error:
                form.add_error(_field_for(error, form), error.message)
                status = error.http_status
            else:
                messages.success(
                    request,
                    "Your edit is a new proposal: it needs the full set of approvals again, "
                    "and you cannot approve it yourself.",
                )
                return redirect("approvals:detail", proposal_id=successor.id)
    why_not = services.ineligibility(proposal, request.user)
    context = {
        **reviewed_context(proposal),
        "form": form,
        "why_not": why_not[1] if why_not else "",
        "open": proposal.state == State.AWAITING_REVIEW,
    }
    return render(request, "approvals/edit.html", context, status=status)
