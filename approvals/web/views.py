"""Reviewer pages over HTTP: the queue, the watching list, the proposal page and its decisions (approve,
reject, ask, edit, revoke), and the public JWKS.

Every page needs a person signed in with a password and a one-time code (accounts.decorators
`verified_required`). Proposal views start with `_proposal_for_reviewer`, which answers 404 to anyone
outside the proposal's tenant. What a page shows is built in approvals/web/pages.py (shared with the
WebSocket consumers) over the querysets of approvals/web/queries.py; views read, and write only through
services; a refusal is a ServiceError whose message is shown next to the field it names, with its HTTP
status. Sign-in and enrollment live in accounts/views.py.
"""

from django.contrib import messages
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_http_methods, require_POST

import signing_keys as keys
from accounts import passkeys, stepup
from approvals import stepup as vote_step_up
from approvals.models import Proposal
from approvals.policy.step_up import needs_passkey
from approvals.selectors import ineligibility, proposal_for_user
from approvals.services.break_glass import break_glass_release, complete_post_hoc_review
from approvals.services.decisions import note_compensation, revoke_decision
from approvals.services.votes import cast_vote, check_edit, check_words, edit_proposal, request_info
from approvals.states import OPEN_FOR_VOTES
from approvals.web import break_glass_pages
from approvals.web.forms import BreakGlassForm, DecisionForm, EditArgumentsForm, PostHocReviewForm, RevokeForm
from approvals.web.list_pages import queue_context, watching_context
from approvals.web.lists import QUEUE, WATCHING
from approvals.web.pages import code_hint, detail_context, page_hash, reviewed_context
from approvals.web.queries import ReviewerScope
from lib.decorators import verified_required
from lib.errors import NotFound, ServiceError, error_body
from tenants.queries import AUDIT_ROLES, DECIDING_ROLES


@require_GET
def jwks(request):
    response = JsonResponse(keys.jwks())
    response["Cache-Control"] = "public, max-age=300"
    return response


# ---------------------------------------------------------------------------------------------------
# Guards


def _proposal_for_reviewer(request, proposal_id, *, for_page: bool = False) -> Proposal:
    try:
        return proposal_for_user(proposal_id, request.user, for_page=for_page)
    except NotFound:
        raise Http404("no such proposal") from None


# ---------------------------------------------------------------------------------------------------
# The queue and the watching list


@require_GET
@verified_required
def queue(request):
    scope = ReviewerScope.of(request.user)
    # Compliance staff decide nothing: their landing page is the audit trail. (Their roles are in the
    # memberships the queue reads anyway.)
    roles = {membership.role for membership in scope.memberships}
    if not roles & DECIDING_ROLES and roles & AUDIT_ROLES:
        return redirect("audit:index")
    context = {**queue_context(request.user, request.GET, scope), "list_page": QUEUE, "nav": "queue"}
    return render(request, "approvals/proposal_list.html", context)


@require_GET
@verified_required
def watching(request):
    context = {**watching_context(request.user, request.GET), "list_page": WATCHING, "nav": "watching"}
    return render(request, "approvals/proposal_list.html", context)


# ---------------------------------------------------------------------------------------------------
# The proposal page


@require_GET
@verified_required
def detail(request, proposal_id):
    proposal = _proposal_for_reviewer(request, proposal_id, for_page=True)
    return render(request, "approvals/detail.html", detail_context(proposal, request.user, request.session))


def _field_for(error: ServiceError, form) -> str | None:
    """The visible field a refusal is about; anything else (the hidden digest) is shown above the form."""
    return (
        error.field if error.field in form.fields and not form.fields[error.field].widget.is_hidden else None
    )


def _decision_response(request, proposal: Proposal, status: int, **decision_kwargs) -> HttpResponse:
    """The decision panel (and the live section, out of band) for htmx; the whole page otherwise."""
    proposal = proposal_for_user(proposal.id, request.user, for_page=True)  # re-read after the service ran
    context = detail_context(proposal, request.user, request.session, **decision_kwargs)
    if not request.htmx:
        return render(request, "approvals/detail.html", context, status=status)
    html = render_to_string("approvals/detail.html#decision", context, request=request) + render_to_string(
        "approvals/detail.html#live", {**context, "oob": True}, request=request
    )
    return HttpResponse(html, status=status)


def _done_response(request, proposal: Proposal, done: str) -> HttpResponse:
    """After a change from the decision panel: the panel with `done` as its notice for htmx; otherwise
    the proposal's page again, with `done` as a message."""
    if request.htmx:
        return _decision_response(request, proposal, 200, notice=done)
    messages.success(request, done)
    return redirect("approvals:detail", proposal_id=proposal.id)


def _refused_on(request, proposal: Proposal, error: ServiceError, **form_kwarg) -> HttpResponse:
    """The decision panel again with the service's refusal on the form field it names (one form, passed
    under the name the panel knows it by: revoke_form=..., break_glass_form=...)."""
    (form,) = form_kwarg.values()
    form.add_error(_field_for(error, form), error.message)
    return _decision_response(request, proposal, error.http_status, **form_kwarg)


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
    reservation = data["reservation"] if data["action"] == "approve" else ""
    try:
        # The words before the factor: a code checked is spent, so a missing reason must not cost it.
        check_words(data["action"], reason=data["reason"], reservation=reservation, question=data["question"])
        # Approve, reject and ask all need the same step-up: each signs a decision for the agent.
        step_up = vote_step_up.step_up_for(
            request.user,
            data["otp_code"],
            request.session,
            passkey=data["passkey"],
            proposal=proposal,
            digest=data["digest"],
        )
        if data["action"] == "ask":
            request_info(
                proposal.id,
                request.user,
                question=data["question"],
                digest_seen=data["digest"],
                step_up=step_up,
            )
        else:
            cast_vote(
                proposal.id,
                request.user,
                verdict=data["action"],
                digest_seen=data["digest"],
                reason=data["reason"],
                reservation=reservation,
                step_up=step_up,
                page_hash=page_hash(proposal),
            )
    except ServiceError as error:
        form.add_error(_field_for(error, form), error.message)
        return _decision_response(request, proposal, error.http_status, form=form)
    return _done_response(request, proposal, DONE_MESSAGES[data["action"]])


@require_POST
@verified_required
def passkey_challenge(request, proposal_id):
    """WebAuthn options for one vote on this proposal as the person sees it (the digest on their page):
    the challenge is bound to both and usable once (accounts/passkeys.py)."""
    proposal = _proposal_for_reviewer(request, proposal_id)
    digest = request.POST.get("digest", "")[:80]
    if not passkeys.has_passkey(request.user):
        return JsonResponse(error_body("no_passkey", "you have no passkey yet"), status=409)
    return JsonResponse(passkeys.vote_options(request.user, proposal.id, digest))


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
            note_compensation(proposal.id, request.user, note=data["note"])
            done = "Your compensation note is recorded."
        else:
            revoke_decision(proposal.id, request.user, reason=data["reason"])
            done = "The decision is revoked; the agent's task is being cancelled."
    except ServiceError as error:
        return _refused_on(request, proposal, error, revoke_form=form)
    return _done_response(request, proposal, done)


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
                check_edit(proposal.action, form.cleaned_data["arguments"])  # before the code is spent
                successor = edit_proposal(
                    proposal.id,
                    request.user,
                    arguments=form.cleaned_data["arguments"],
                    digest_seen=form.cleaned_data["digest"],
                    note=form.cleaned_data["note"],
                    step_up=stepup.step_up_for(
                        request.user,
                        form.cleaned_data["otp_code"],
                        request.session,
                        passkey=form.cleaned_data["passkey"],
                        proposal_id=proposal.id,
                        digest=form.cleaned_data["digest"],
                    ),
                )
            except ServiceError as error:
                form.add_error(_field_for(error, form), error.message)
                status = error.http_status
            else:
                messages.success(
                    request,
                    "Your edit is a new proposal: it needs the full set of approvals again, "
                    "and you cannot approve it yourself.",
                )
                return redirect("approvals:detail", proposal_id=successor.id)
    why_not = ineligibility(proposal, request.user)
    has_passkey = passkeys.has_passkey(request.user)
    context = {
        **reviewed_context(proposal),
        "form": form,
        "why_not": why_not[1] if why_not else "",
        "open": proposal.state in OPEN_FOR_VOTES,
        "code_hint": code_hint(proposal),
        "needs_passkey": needs_passkey(proposal.requirements),
        "has_passkey": has_passkey,
        "no_factor": not has_passkey and not vote_step_up.code_owners_among([request.user.pk]),
    }
    return render(request, "approvals/edit.html", context, status=status)


# ---------------------------------------------------------------------------------------------------
# Break-glass: the emergency release, its post-hoc reviews, and the admins' oversight page


@require_POST
@verified_required
def break_glass(request, proposal_id):
    """Release on one named person's authority (approvals/services/break_glass.py decides)."""
    proposal = _proposal_for_reviewer(request, proposal_id)
    form = BreakGlassForm(request.POST)
    if not form.is_valid():
        return _decision_response(request, proposal, 400, break_glass_form=form)
    data = form.cleaned_data
    try:
        break_glass_release(
            proposal.id,
            request.user,
            reason=data["reason"],
            digest_seen=data["digest"],
            step_up=stepup.step_up_for(request.user, data["otp_code"], request.session),
            page_hash=page_hash(proposal),
        )
    except ServiceError as error:
        return _refused_on(request, proposal, error, break_glass_form=form)
    done = "Released by break glass. Two other people will review it; you can still revoke it."
    return _done_response(request, proposal, done)


@require_POST
@verified_required
def post_hoc_review(request, proposal_id):
    """Record the person's post-hoc review of a break-glass release (agree or disagree, with a note)."""
    proposal = _proposal_for_reviewer(request, proposal_id)
    form = PostHocReviewForm(request.POST)
    status = 400
    if form.is_valid():
        try:
            complete_post_hoc_review(
                form.cleaned_data["review"],
                request.user,
                verdict=form.cleaned_data["verdict"],
                note=form.cleaned_data["note"],
            )
        except ServiceError as error:
            form.add_error(_field_for(error, form), error.message)
            status = error.http_status
        else:
            messages.success(request, "Your post-hoc review is recorded.")
            return redirect("approvals:detail", proposal_id=proposal.id)
    context = detail_context(proposal, request.user, request.session, post_hoc_form=form)
    return render(request, "approvals/detail.html", context, status=status)


@require_GET
@verified_required
def break_glass_oversight(request):
    """For tenant admins: overdue post-hoc reviews, exhausted budgets and recent break-glass releases."""
    if not break_glass_pages.admin_tenants(request.user):
        raise Http404("only tenant admins see break-glass oversight")
    context = {**break_glass_pages.oversight_context(request.user), "nav": "break_glass"}
    return render(request, "approvals/break_glass.html", context)
