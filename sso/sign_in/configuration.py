"""The admin's changes of how a tenant signs in: its identity provider and its group mappings, each saved
or deleted with its audit event (identity_provider.changed)."""

from django.db import transaction

from audit.labels import actor_label
from audit.models import Verb
from audit.trail import record


def save_provider_configuration(obj, *, actor, changed: list[str]) -> None:
    """The admin's change of a tenant's identity provider or of one of its group mappings (`obj`, a
    form-built IdentityProvider or ProviderGroupMapping), saved with its audit event. Secrets are never
    recorded: only the name of the variable or file that holds them."""
    with transaction.atomic():
        obj.save()
        record(
            obj.tenant_id,
            actor=actor_label(actor),
            verb=Verb.IDENTITY_PROVIDER_CHANGED,
            subject=f"identity_provider:{obj.tenant.slug}",
            data={"what": obj._meta.model_name, "id": obj.pk, "changed": sorted(changed)},
        )


def delete_provider_configuration(obj, *, actor) -> None:
    with transaction.atomic():
        tenant_id, slug, what, pk = obj.tenant_id, obj.tenant.slug, obj._meta.model_name, obj.pk
        obj.delete()
        record(
            tenant_id,
            actor=actor_label(actor),
            verb=Verb.IDENTITY_PROVIDER_CHANGED,
            subject=f"identity_provider:{slug}",
            data={"what": what, "id": pk, "deleted": True},
        )
