"""django-scim2's adapters for Reviewer's SCIM resources (sso/models.py ScimUser and ScimGroup).

django-scim2 routes the requests, parses filters, pages lists and writes SCIM's error format; these
adapters turn a resource into JSON and back, and hand every change to sso/scim/provisioning.py (which checks,
audits and applies it). PATCH is parsed here for the shapes Okta and Entra ID send: `replace` with a
value object or a path, `active` as a boolean or as Entra's "False"/"True" strings, `add`/`remove` of
`members` with a value list or a `members[value eq "…"]` path.
"""

from typing import Any
from urllib.parse import urljoin

from django.urls import reverse
from django_scim import constants, exceptions
from django_scim.adapters import SCIMGroup, SCIMUser

from sso.errors import ProvisioningRefused
from sso.models import ScimGroup, ScimUser
from sso.scim import provisioning
from sso.scim.filters import GroupFilterQuery, UserFilterQuery


def scim_user_model():
    return ScimUser


def base_location(request=None, *args, **kwargs) -> str:
    return request.build_absolute_uri("/").rstrip("/") if request is not None else ""


def tenant_filter(model):
    """django-scim2's extra filter for every lookup and list: the token's tenant only."""

    def extra_filter_kwargs(request, *args, **kwargs):
        return {"tenant_id": request.scim_tenant.id}

    return extra_filter_kwargs


ALWAYS_RETURNED = {"id", "schemas", "meta", "userName", "displayName"}  # per the schemas' "returned"


def _project(document: dict, request) -> dict:
    """The `attributes` / `excludedAttributes` query parameters (RFC 7644 3.4.2.5), on top-level names:
    what is always returned stays."""
    if request is None:
        return document
    wanted = _names(request.GET.get("attributes"))
    excluded = _names(request.GET.get("excludedAttributes"))
    if wanted:
        return {key: value for key, value in document.items() if key in wanted or key in ALWAYS_RETURNED}
    if excluded:
        return {
            key: value for key, value in document.items() if key not in excluded or key in ALWAYS_RETURNED
        }
    return document


def _names(parameter: str | None) -> set[str]:
    names = set()
    for name in (parameter or "").split(","):
        name = name.strip().rpartition(":")[2]  # a full URN prefix names the core schema's attribute
        if name:
            names.add(name.partition(".")[0])
    return names


def _refused(refusal: ProvisioningRefused) -> exceptions.SCIMException:
    return exceptions.SCIMException(refusal.detail, status=refusal.status, scim_type=refusal.scim_type)


def _boolean(value, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):  # Entra ID sends strings
        return value.lower() == "true"
    raise exceptions.BadRequestError(f"{name} is true or false, not {value!r}", scim_type="invalidValue")


def _person_values(body: dict) -> dict:
    values = {}
    if "userName" in body:
        values["user_name"] = body["userName"]
    if "externalId" in body:
        values["external_id"] = body["externalId"] or ""
    name = body.get("name") or {}
    if not isinstance(name, dict):
        raise exceptions.BadRequestError("name is an object", scim_type="invalidValue")
    if "givenName" in name:
        values["given_name"] = str(name["givenName"] or "")
    if "familyName" in name:
        values["family_name"] = str(name["familyName"] or "")
    emails = body.get("emails")
    if emails:
        if not isinstance(emails, list) or not all(isinstance(e, dict) for e in emails):
            raise exceptions.BadRequestError("emails is a list of objects", scim_type="invalidValue")
        primary = [e for e in emails if e.get("primary")] or emails
        values["email"] = str(primary[0].get("value") or "")
        values["emails"] = [
            {
                "value": str(e.get("value") or ""),
                "type": str(e.get("type") or "work"),
                "primary": bool(e.get("primary")),
            }
            for e in emails[:10]
        ]
    if "active" in body:
        values["active"] = _boolean(body["active"], "active")
    return values


def _relative_resource_type(adapter, document: dict, request) -> dict:
    """A ResourceType document whose endpoint is relative to the SCIM base URL (RFC 7643 6) and whose
    location is this server's, for either adapter."""
    document["endpoint"] = f"/{adapter.resource_type}s"
    document["meta"]["location"] = urljoin(
        base_location(request), reverse("scim:resource-types", kwargs={"uuid": adapter.resource_type})
    )
    return document


class ScimUserAdapter(SCIMUser):
    ATTR_MAP = UserFilterQuery.attr_map
    id_field = "scim_id"
    obj: ScimUser  # django_scim's adapter holds the record it serves (its base class is untyped)

    @property
    def location(self):
        return urljoin(base_location(self.request), self.path)

    def to_dict(self):
        user, record = self.obj.user, self.obj
        document = self._document(user, record)
        return _project({key: value for key, value in document.items() if value is not None}, self._request)

    def _document(self, user, record) -> dict:
        return {
            "schemas": [constants.SchemaURI.USER],
            "id": str(record.scim_id),
            "externalId": record.external_id or None,
            "userName": record.user_name,
            "name": {"givenName": user.first_name, "familyName": user.last_name}
            if user.first_name or user.last_name
            else None,
            "displayName": user.get_full_name() or record.user_name,
            "emails": record.emails
            or ([{"value": user.email, "primary": True, "type": "work"}] if user.email else []),
            "active": record.active,
            "groups": [
                {"value": str(group.scim_id), "display": group.display_name}
                for group in record.groups.order_by("display_name")
            ],
            "meta": {
                "resourceType": "User",
                "created": record.created_at.isoformat(),
                "lastModified": record.updated_at.isoformat(),
                "location": self.location,
            },
        }

    def validate_dict(self, d):
        if not isinstance(d, dict):
            raise exceptions.BadRequestError("the body is a JSON object", scim_type="invalidSyntax")

    def from_dict(self, d):
        self.values = _person_values(d)

    def save(self):
        try:
            if self.obj.pk is None:
                self.obj = provisioning.provision_user(self.request.scim_tenant, self.values)
            else:
                self.obj = provisioning.update_user(self.obj, self.values)
        except ProvisioningRefused as refusal:
            raise _refused(refusal) from None

    def delete(self):
        provisioning.delete_user(self.obj)

    def handle_operations(self, operations):
        values = {}
        for operation in operations:
            op = str(operation.get("op", "")).lower()
            path, value = operation.get("path"), operation.get("value")
            if op == "remove":
                values.update(_removed_user_attribute(path or ""))
                continue
            if op not in ("add", "replace"):
                raise exceptions.BadRequestError(f"unknown PATCH op {op!r}", scim_type="invalidSyntax")
            changes = value if not path else _nested(path, value)
            if not isinstance(changes, dict):
                raise exceptions.BadRequestError(
                    "the operation's value is an object", scim_type="invalidValue"
                )
            values.update(_person_values(_expand_dotted(changes)))
        try:
            self.obj = provisioning.update_user(self.obj, values)
        except ProvisioningRefused as refusal:
            raise _refused(refusal) from None

    @classmethod
    def resource_type_dict(cls, request=None):
        return _relative_resource_type(cls, super().resource_type_dict(request), request)


def _nested(path: str, value) -> dict:
    """A PATCH path as a body fragment: "active" → {"active": v}, "name.givenName" → {"name.givenName": v},
    'emails[type eq "work"].value' → {"emails": [{"value": v, "primary": True}]}."""
    if path.startswith("emails") and path != "emails":
        return {"emails": [{"value": value, "primary": True}]}
    return {path: value}


def _removed_user_attribute(path: str) -> dict:
    """A PATCH remove: the attribute unassigned. userName and active cannot be (remove the person with
    DELETE, or set active to false)."""
    head = path.partition("[")[0].partition(".")[0]
    if head == "externalId":
        return {"external_id": ""}
    if head == "name":
        sub = path.partition(".")[2]
        return {
            key: ""
            for key, name in (("given_name", "givenName"), ("family_name", "familyName"))
            if sub in ("", name)
        }
    if head == "emails":
        return {"email": "", "emails": []}
    raise exceptions.BadRequestError(
        f"{path or 'an attribute'} cannot be removed: set active to false, or DELETE the user",
        scim_type="mutability",
    )


def _expand_dotted(changes: dict) -> dict:
    expanded: dict[str, Any] = {}
    for key, value in changes.items():
        head, _, tail = key.partition(".")
        if tail:
            expanded.setdefault(head, {})[tail] = value
        else:
            expanded[key] = value
    return expanded


class ScimGroupAdapter(SCIMGroup):
    ATTR_MAP = GroupFilterQuery.attr_map
    id_field = "scim_id"
    obj: ScimGroup

    @property
    def location(self):
        return urljoin(base_location(self.request), self.path)

    def to_dict(self):
        return _project(self._document(self.obj), self._request)

    def _document(self, group) -> dict:
        return {
            "schemas": [constants.SchemaURI.GROUP],
            "id": str(group.scim_id),
            "externalId": group.external_id or None,
            "displayName": group.display_name,
            # value and type: the sub-attributes the published Group schema gives members (RFC 7643 8.7.1)
            "members": [
                {"value": str(member.scim_id), "$ref": self._user_location(member), "type": "User"}
                for member in group.members.order_by("user_name")
            ],
            "meta": {
                "resourceType": "Group",
                "created": group.created_at.isoformat(),
                "lastModified": group.updated_at.isoformat(),
                "location": self.location,
            },
        }

    def _user_location(self, member) -> str:
        return urljoin(
            base_location(self.request), reverse("scim:users", kwargs={"uuid": str(member.scim_id)})
        )

    def validate_dict(self, d):
        if not isinstance(d, dict):
            raise exceptions.BadRequestError("the body is a JSON object", scim_type="invalidSyntax")

    def from_dict(self, d):
        members = d.get("members") or []
        if not isinstance(members, list) or not all(isinstance(m, dict) and "value" in m for m in members):
            raise exceptions.BadRequestError("members is a list of {value: id}", scim_type="invalidValue")
        self.changes = {
            "display_name": d.get("displayName"),
            "external_id": d.get("externalId"),
            "set_members": [str(m["value"]) for m in members],
        }

    def save(self):
        try:
            self.obj = provisioning.save_group(
                self.request.scim_tenant, self.obj if self.obj.pk else None, **self.changes
            )
        except ProvisioningRefused as refusal:
            raise _refused(refusal) from None

    def delete(self):
        provisioning.delete_group(self.obj)

    def handle_operations(self, operations):
        changes: dict[str, Any] = {"add_members": [], "remove_members": []}
        for operation in operations:
            op = str(operation.get("op", "")).lower()
            path, value = operation.get("path") or "", operation.get("value")
            if path.startswith("members[") and op == "remove":  # Okta: members[value eq "id"]
                changes["remove_members"].append(_member_in_path(path))
            elif path == "members" and op == "remove" and not value:
                changes["set_members"] = []  # no value: every member removed (RFC 7644 3.5.2.2)
            elif path == "members" and op in ("add", "remove"):
                ids = [str(m.get("value")) for m in (value or []) if isinstance(m, dict)]
                changes["add_members" if op == "add" else "remove_members"].extend(ids)
            elif path == "externalId" and op in ("add", "replace", "remove"):
                changes["external_id"] = "" if op == "remove" else str(value or "")
            elif path == "members" and op == "replace":
                changes["set_members"] = [str(m.get("value")) for m in (value or []) if isinstance(m, dict)]
            elif op == "replace" and (
                path in ("displayName", "externalId") or (not path and isinstance(value, dict))
            ):
                fields = {path: value} if path else value
                if "displayName" in fields:
                    changes["display_name"] = fields["displayName"]
                if "externalId" in fields:
                    changes["external_id"] = fields["externalId"]
                if "members" in fields:
                    changes["set_members"] = [str(m.get("value")) for m in fields["members"] or []]
            else:
                raise exceptions.BadRequestError(f"unsupported group operation {op!r} on {path!r}")
        try:
            self.obj = provisioning.save_group(self.request.scim_tenant, self.obj, **changes)
        except ProvisioningRefused as refusal:
            raise _refused(refusal) from None

    @classmethod
    def resource_type_dict(cls, request=None):
        return _relative_resource_type(cls, super().resource_type_dict(request), request)


def _member_in_path(path: str) -> str:
    inside = path[len("members[") :].rstrip("]").strip()
    attribute, _, quoted = inside.partition(" eq ")
    if attribute.strip() != "value" or not quoted.strip().startswith('"'):
        raise exceptions.BadRequestError(f"unsupported member filter {path!r}", scim_type="invalidFilter")
    return quoted.strip().strip('"')
